package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/tcprelay"
)

// checkKey asks base's /v1/check for a call made with the api key secret
// and returns the status.
func checkKey(t *testing.T, base, secret string) int {
	t.Helper()
	code, _ := call(t, http.MethodPost, base+"/v1/check", `{"descriptors": {"api_key": "`+secret+`"}}`)
	return code
}

// answersWithin polls check until it answers want and returns how long
// that took from start, failing t past within.
func answersWithin(t *testing.T, start time.Time, within time.Duration, what string, want int, check func() int) time.Duration {
	t.Helper()
	for {
		code := check()
		took := time.Since(start)
		if code == want {
			return took
		}
		if took > within {
			t.Fatalf("%s: still %d after %v, want %d within %v", what, code, took, want, within)
		}
		time.Sleep(5 * time.Millisecond) // polling a replica, until the deadline
	}
}

// refusedWithinASecondOfExpiry checks that each replica (name → base
// URL) refuses the key that expires at expiry — probe answers 401 —
// within a second of it, and none before.
func refusedWithinASecondOfExpiry(t *testing.T, expiry time.Time, replicas map[string]string, probe func(base string) int) {
	t.Helper()
	for name, base := range replicas {
		var refusedAt time.Time
		answersWithin(t, expiry, time.Second, "the expired key on "+name, http.StatusUnauthorized, func() int {
			code := probe(base)
			if code == http.StatusUnauthorized {
				refusedAt = time.Now()
			}
			return code
		})
		if refusedAt.Before(expiry) {
			t.Errorf("%s refused the key at %v, before its expiry %v", name, refusedAt, expiry)
		}
		t.Logf("%s refused the expired key %v after its expiry", name, refusedAt.Sub(expiry))
	}
}

// TestServeReplicasAgreeWithinASecond: two tokenlimit serve processes on
// one redis-server. A key created on A is in force on B, a key disabled on
// A is refused on B, a key revoked on B is refused on A, each within a
// second of the answer to the write; a key past its expiry is refused by
// both within a second of its expiry, and by neither before it. No secret
// is in either replica's log or metrics, nor in Redis.
func TestServeReplicasAgreeWithinASecond(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	args := []string{"serve", "--redis", srv.URL(), "--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-token", "secret", "--log-level", "debug"}
	_, a, logsA := startChild(t, nil, "serving HTTP", args...)
	_, b, logsB := startChild(t, nil, "serving HTTP", args...)

	var secrets []string
	create := func(base, spec string) (id, secret string) {
		t.Helper()
		code, k := call(t, http.MethodPost, base+"/v1/admin/keys", spec)
		id, _ = k["id"].(string)
		secret, _ = k["secret"].(string)
		if code != http.StatusCreated || id == "" || secret == "" {
			t.Fatalf("POST keys on %s: %d %v", base, code, k)
		}
		secrets = append(secrets, secret)
		return id, secret
	}
	defer func() {
		// What could hold a secret: each replica's log and metrics, and
		// the plane's records and stream in Redis.
		places := map[string]string{"A's log": logsA.String(), "B's log": logsB.String()}
		for name, base := range map[string]string{"A's metrics": a, "B's metrics": b} {
			res, err := http.Get(base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(res.Body)
			res.Body.Close()
			places[name] = string(data)
		}
		for _, cmd := range [][]string{{"HGETALL", "{tl:plane}:records"}, {"XRANGE", "{tl:plane}:log", "-", "+"}} {
			out, err := srv.Do(cmd...)
			if err != nil || !strings.Contains(out, "digest") {
				t.Fatalf("%v: %q %v, want the records", cmd, out, err)
			}
			places["Redis' "+cmd[1]] = out
		}
		for name, text := range places {
			for _, s := range secrets {
				if strings.Contains(text, s[len("tl-"):len("tl-")+16]) {
					t.Errorf("%s holds (part of) a secret", name)
				}
			}
		}
	}()

	id, secret := create(a, `{"name": "laptop"}`)
	took := answersWithin(t, time.Now(), time.Second, "a key created on A, used on B", http.StatusOK, func() int { return checkKey(t, b, secret) })
	t.Logf("created on A, in force on B after %v", took)

	code, k := call(t, http.MethodPut, a+"/v1/admin/keys/"+id, `{"name": "laptop", "disabled": true}`)
	if code != http.StatusOK || k["disabled"] != true {
		t.Fatalf("PUT disabled on A: %d %v", code, k)
	}
	took = answersWithin(t, time.Now(), time.Second, "a key disabled on A, refused on B", http.StatusUnauthorized, func() int { return checkKey(t, b, secret) })
	t.Logf("disabled on A, refused on B after %v", took)

	id, secret = create(b, `{"name": "ci"}`)
	answersWithin(t, time.Now(), time.Second, "a key created on B, used on A", http.StatusOK, func() int { return checkKey(t, a, secret) })
	if code, body := call(t, http.MethodDelete, b+"/v1/admin/keys/"+id, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE on B: %d %v", code, body)
	}
	took = answersWithin(t, time.Now(), time.Second, "a key revoked on B, refused on A", http.StatusUnauthorized, func() int { return checkKey(t, a, secret) })
	t.Logf("revoked on B, refused on A after %v", took)
	if code := checkKey(t, b, secret); code != http.StatusUnauthorized {
		t.Errorf("B after the revocation: %d, want 401", code)
	}

	// A key expiring 3 s from now (RFC 3339 to the millisecond).
	expiry := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	_, secret = create(a, `{"name": "short", "expires_at": "`+expiry.UTC().Format(time.RFC3339Nano)+`"}`)
	answersWithin(t, time.Now(), time.Second, "an expiring key created on A, used on B", http.StatusOK, func() int { return checkKey(t, b, secret) })
	refusedWithinASecondOfExpiry(t, expiry, map[string]string{"A": a, "B": b}, func(base string) int { return checkKey(t, base, secret) })
}

// TestPlaneAdminDuringRedisOutage: tokenlimit serve on a Redis that goes
// away (a relay that closes). Every admin write answers 503 and changes
// nothing, then or after Redis returns; the answer says that nothing
// changed, or, for a write rueidis may have sent on the connection the
// relay broke, that it may or may not have been applied; reads answer from the last known
// plane; decisions go on with it, each limit following its failure mode
// (a fail-open limit admits, a fail-closed one answers 503, a key revoked
// before the outage stays refused). When Redis returns, writes succeed
// again.
func TestPlaneAdminDuringRedisOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, err := tcprelay.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	cfg := filepath.Join(t.TempDir(), "plane.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n  - {name: rpm, key: [api_key], algorithm: fixed_window, limit: 100/min, failure_mode: open}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A long store timeout, so that a loaded machine never makes Redis look
	// down before the relay closes (a closed relay refuses at once).
	_, base := child(t, "serve", "--config", cfg, "--redis", "redis://"+relay.Addr(), "--store-timeout", "10s",
		"--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-token", "secret")

	write := func(method, path, body string, want int) map[string]any {
		t.Helper()
		code, out := call(t, method, base+path, body)
		if code != want {
			t.Fatalf("%s %s: %d %v, want %d", method, path, code, out, want)
		}
		return out
	}
	write(http.MethodPost, "/v1/admin/teams", `{"name": "acme"}`, http.StatusCreated)
	open := write(http.MethodPost, "/v1/admin/keys", `{"name": "open", "team": "acme"}`, http.StatusCreated)
	closed := write(http.MethodPost, "/v1/admin/keys", `{"name": "closed", "team": "acme", "limits": [{"name": "calls", "algorithm": "sliding_log", "limit": "1000/h", "failure_mode": "closed"}]}`, http.StatusCreated)
	gone := write(http.MethodPost, "/v1/admin/keys", `{"name": "gone"}`, http.StatusCreated)
	write(http.MethodDelete, "/v1/admin/keys/"+gone["id"].(string), "", http.StatusNoContent)
	openID, closedID := open["id"].(string), closed["id"].(string)
	secrets := map[string]string{"open": open["secret"].(string), "closed": closed["secret"].(string), "gone": gone["secret"].(string)}
	decisions := func(when string, want map[string]int) {
		t.Helper()
		for name, code := range want {
			if got := checkKey(t, base, secrets[name]); got != code {
				t.Errorf("%s, a call with key %s: %d, want %d", when, name, got, code)
			}
		}
	}
	decisions("before the outage", map[string]int{"open": http.StatusOK, "closed": http.StatusOK, "gone": http.StatusUnauthorized})

	// What the plane holds, as the API lists it and as Redis counts its
	// writes.
	listing := func() string {
		t.Helper()
		var parts []string
		for _, path := range []string{"/v1/admin/teams", "/v1/admin/keys"} {
			code, out := call(t, http.MethodGet, base+path, "")
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d %v", path, code, out)
			}
			data, _ := json.Marshal(out)
			parts = append(parts, string(data))
		}
		return strings.Join(parts, "\n")
	}
	before := listing()
	seq, err := srv.Do("GET", "{tl:plane}:seq")
	if err != nil {
		t.Fatal(err)
	}

	if err := relay.Close(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/admin/teams", `{"name": "other"}`},
		{http.MethodPut, "/v1/admin/teams/acme", `{"labels": {"env": "prod"}}`},
		{http.MethodPost, "/v1/admin/keys", `{"name": "new", "team": "acme"}`},
		{http.MethodPut, "/v1/admin/keys/" + openID, `{"name": "renamed", "team": "acme"}`},
		{http.MethodPost, "/v1/admin/keys/" + openID + "/rotate", `{"grace": "1h"}`},
		{http.MethodDelete, "/v1/admin/keys/" + closedID, ""},
	} {
		out := write(w.method, w.path, w.body, http.StatusServiceUnavailable)
		if msg := fmt.Sprint(out["error"]); !strings.Contains(msg, "nothing changed") && !strings.Contains(msg, "may or may not") {
			t.Errorf("%s %s during the outage answers %s, want it to say that nothing changed, or that it may not have", w.method, w.path, msg)
		}
	}
	if got := listing(); got != before {
		t.Errorf("during the outage the plane lists\n%s\nwant the last known\n%s", got, before)
	}
	decisions("during the outage", map[string]int{"open": http.StatusOK, "closed": http.StatusServiceUnavailable, "gone": http.StatusUnauthorized})

	if err := relay.Reopen(); err != nil {
		t.Fatal(err)
	}
	answersWithin(t, time.Now(), 30*time.Second, "the fail-closed key once Redis is back", http.StatusOK, func() int { return checkKey(t, base, secrets["closed"]) })
	if got, err := srv.Do("GET", "{tl:plane}:seq"); err != nil || got != seq {
		t.Errorf("Redis' plane sequence after the outage: %q %v, want %q: a write landed", got, err, seq)
	}
	if got := listing(); got != before {
		t.Errorf("after the outage the plane lists\n%s\nwant what it held before\n%s", got, before)
	}
	decisions("after the outage", map[string]int{"open": http.StatusOK, "closed": http.StatusOK, "gone": http.StatusUnauthorized})
	write(http.MethodPost, "/v1/admin/teams", `{"name": "other"}`, http.StatusCreated)
}

// TestServeCountsRefusedSecrets: tokenlimit serve counts the refused plane
// secrets of /v1/check in --auth-failures per caller: past it, that
// caller's next refusal is a 429.
func TestServeCountsRefusedSecrets(t *testing.T) {
	t.Parallel()
	_, base := child(t, "serve", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-token", "secret", "--auth-failures", "2/min")
	const unknown = "tl-00000000000000000000000000000000000000000000000000000000000000ff"
	for i, want := range []int{http.StatusUnauthorized, http.StatusUnauthorized, http.StatusTooManyRequests} {
		code, body := call(t, http.MethodPost, base+"/v1/check", `{"descriptors": {"api_key": "`+unknown+`", "remote_address": "203.0.113.7"}}`)
		if code != want {
			t.Fatalf("refusal %d: %d %v, want %d", i+1, code, body, want)
		}
	}
}
