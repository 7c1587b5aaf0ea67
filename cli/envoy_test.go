package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/tcprelay"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/server/rlsv3"
)

const envoyYAML = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: %d}
`

func writeEnvoyDir(t *testing.T, dir string, perHour int) {
	t.Helper()
	data := fmt.Sprintf(envoyYAML, perHour)
	tmp := filepath.Join(dir, ".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "config.yaml")); err != nil {
		t.Fatal(err)
	}
}

// TestServeEnvoyConfig runs the compatibility mode on both stores: gRPC
// answers, POST /json, health, and a reload when the directory changes.
func TestServeEnvoyConfig(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			args := []string{"--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--reload-every", "20ms", "--log-level", "debug"}
			if store == "redis" { // a store timeout that a loaded machine does not reach: this test is not about failures
				args = append(args, "--redis", redistest.Start(t).URL(), "--store-timeout", "10s")
			}
			dir := t.TempDir()
			writeEnvoyDir(t, dir, 2)
			ctx, cancel := context.WithCancel(context.Background())
			logs := newSyncBuffer()
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, append([]string{"serve", "--envoy-config", dir}, args...), logs.w, io.Discard)
				logs.w.Close()
			}()
			httpBase := "http://" + logs.addr(t, "serving HTTP")
			conn := dialGRPC(t, logs)
			rls := rlspb.NewRateLimitServiceClient(conn)
			ask := func(user string) *rlspb.RateLimitResponse {
				t.Helper()
				resp, err := rls.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*commonpb.RateLimitDescriptor{
					{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
				}})
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
				resp := ask("alice")
				if resp.OverallCode != want || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 || resp.Statuses[0].CurrentLimit.GetUnit() != rlspb.RateLimitResponse_RateLimit_HOUR {
					t.Fatalf("call %d: %v, want %v with 2 per HOUR", i, resp, want)
				}
			}
			// POST /json: same answers, 429 when over, 400 for nonsense.
			post := func(body string) (int, string) {
				t.Helper()
				r, err := http.Post(httpBase+"/json", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer r.Body.Close()
				b, _ := io.ReadAll(r.Body)
				return r.StatusCode, string(b)
			}
			if code, body := post(`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}`); code != http.StatusTooManyRequests || !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) {
				t.Errorf("/json over the limit: %d %s", code, body)
			}
			if code, body := post(`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"bob"}]}]}`); code != http.StatusOK || !strings.Contains(body, `"limitRemaining":1`) {
				t.Errorf("/json: %d %s", code, body)
			}
			for _, bad := range []string{`{"domain":`, `{"domain":"api","descriptors":[]}`, `{"nonsense":1}`} {
				if code, body := post(bad); code != http.StatusBadRequest || strings.TrimSpace(body) != "Bad Request" {
					t.Errorf("/json %s: %d %q, want 400 Bad Request", bad, code, body)
				}
			}
			logs.addr(t, "json: bad request") // logged at debug: --log-level holds here too
			health := healthpb.NewHealthClient(conn)
			for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
				testkit.Eventually(t, 20*time.Second, "health "+svc+" SERVING", func() bool {
					h, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
					return err == nil && h.Status == healthpb.HealthCheckResponse_SERVING
				})
			}
			if r, err := http.Get(httpBase + "/healthcheck"); err != nil || r.StatusCode != http.StatusOK {
				t.Errorf("/healthcheck: %v %v", r, err)
			}

			// A bad file is rejected and the running limits stay; a good
			// one is picked up.
			if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("domain: x\ndescriptors:\n  - colour: red\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			logs.addr(t, "envoy config rejected; the running limits stay")
			if resp := ask("carol"); resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
				t.Fatalf("after a bad file: %v, want the running limit of 2", resp)
			}
			if err := os.Remove(filepath.Join(dir, "bad.yaml")); err != nil {
				t.Fatal(err)
			}
			writeEnvoyDir(t, dir, 5)
			testkit.Eventually(t, 20*time.Second, "the new limit of 5", func() bool { return ask("dave").Statuses[0].CurrentLimit.GetRequestsPerUnit() == 5 })

			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Fatalf("serve returned %v after shutdown", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("serve did not shut down")
			}
		})
	}
}

func TestValidateAndMigrateEnvoy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeEnvoyDir(t, dir, 7)
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"validate", "--envoy-config", dir}, &out, io.Discard); err != nil || !strings.HasSuffix(out.String(), ": valid envoyproxy/ratelimit configuration, 1 file, 1 domain, 1 limit\n") {
		t.Errorf("validate --envoy-config: %v %q", err, out.String())
	}
	out.Reset()
	if err := Run(context.Background(), []string{"migrate", "--from-envoy", dir}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(out.Bytes(), "migrated.yaml")
	if err != nil {
		t.Fatalf("migrate output does not load natively: %v\n%s", err, out.String())
	}
	if len(cfg.Limits) != 1 || cfg.Limits[0].Limit.Quota != 7 || cfg.Limits[0].Match["domain"] != "api" {
		t.Errorf("migrated limits %+v", cfg.Limits)
	}
	if !strings.Contains(out.String(), "all-or-nothing") {
		t.Errorf("migrate output does not list the differences:\n%s", out.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "limits.yaml"), []byte("limits:\n  - name: a\n    key: [user]\n    algorithm: fixed_window\n    limit: 1/s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = Run(context.Background(), []string{"validate", "--envoy-config", dir}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "limits.yaml:1: limits: this is a tokenlimit configuration file") {
		t.Errorf("validate of a mixed directory: %v", err)
	}
	err = Run(context.Background(), []string{"validate", filepath.Join(dir, "config.yaml")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "looks like an envoyproxy/ratelimit file: load its directory with --envoy-config "+dir) {
		t.Errorf("native validate of an envoy file: %v", err)
	}
	err = Run(context.Background(), []string{"validate", dir}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "use --envoy-config "+dir) {
		t.Errorf("native validate of a directory: %v", err)
	}
	err = Run(context.Background(), []string{"serve", "--envoy-config", dir, "--config", filepath.Join(dir, "limits.yaml")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--config and --envoy-config") {
		t.Errorf("serve with both: %v", err)
	}
}

// TestEnvoyFailureModeFlag: a bad --envoy-failure-mode stops serve at
// start with an error naming the flag, the spec and the reason; one that
// names nothing in the configuration too.
func TestEnvoyFailureModeFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeEnvoyDir(t, dir, 7)
	for spec, want := range map[string]string{
		"api.user=loud": `--envoy-failure-mode api.user=loud: mode "loud": want error, closed or open`,
		"=closed":       "--envoy-failure-mode =closed: the domain or descriptor path before '=' must not be empty",
		"api.usr=open":  "--envoy-failure-mode api.usr=open: no such domain or descriptor in the configuration",
		"web=closed":    "--envoy-failure-mode web=closed: no such domain or descriptor in the configuration",
	} {
		err := Run(context.Background(), []string{"serve", "--envoy-config", dir, "--listen", "127.0.0.1:0", "--grpc-listen", "", "--envoy-failure-mode", spec}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--envoy-failure-mode %s: %v, want %q", spec, err, want)
		}
	}
}

func TestEnvoyEnv(t *testing.T) {
	t.Parallel()
	apply := func(env map[string]string, args ...string) (serveFlags, error) {
		var f serveFlags
		fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		fl.StringVar(&f.envoyConfig, "envoy-config", "", "")
		fl.StringVar(&f.listen, "listen", "", "")
		fl.StringVar(&f.grpcListen, "grpc-listen", "", "")
		fl.StringVar(&f.redis, "redis", "", "")
		f.logFlags.register(fl)
		if err := fl.Parse(args); err != nil {
			t.Fatal(err)
		}
		err := applyEnvoyEnv(&f, fl, func(k string) string { return env[k] })
		return f, err
	}
	f, err := apply(map[string]string{})
	if err != nil || f.envoyConfig != "/srv/runtime_data/current/config" || f.listen != "0.0.0.0:8080" || f.grpcListen != "0.0.0.0:8081" ||
		f.redis != "unix:///var/run/nutcracker/ratelimit.sock" || f.logLevel != "warn" || f.logFormat != "json" {
		t.Errorf("defaults: %+v %v", f, err)
	}
	f, err = apply(map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_APPDIRECTORY": "conf", "PORT": "9080", "GRPC_PORT": "9081",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_AUTH": "user:pw", "REDIS_TLS": "true", "LOG_LEVEL": "debug", "LOG_FORMAT": "TEXT",
		"CACHE_KEY_PREFIX": "p_", "SHADOW_MODE": "true", "MERGE_DOMAIN_CONFIG": "true", "LIMIT_RESPONSE_HEADERS_ENABLED": "true",
	}, "--listen", "127.0.0.1:1")
	if err != nil || f.envoyConfig != "/data/ratelimit/conf" || f.listen != "127.0.0.1:1" || f.grpcListen != "0.0.0.0:9081" ||
		f.redis != "rediss://user:pw@redis:6379" || f.logLevel != "debug" || f.logFormat != "text" || f.envoy.engine.KeyPrefix != "p_" ||
		!f.envoy.engine.GlobalShadowMode || !f.envoy.load.MergeDomains || f.envoy.engine.Headers == nil || f.envoy.engine.Headers.Limit != "RateLimit-Limit" {
		t.Errorf("set: %+v %v", f, err)
	}
	// --log-level and --log-format on the command line win over LOG_LEVEL
	// and LOG_FORMAT.
	f, err = apply(map[string]string{"LOG_LEVEL": "debug", "LOG_FORMAT": "text"}, "--log-level", "error", "--log-format", "json")
	if err != nil || f.logLevel != "error" || f.logFormat != "json" {
		t.Errorf("flags over LOG_LEVEL and LOG_FORMAT: %q %q %v, want error json", f.logLevel, f.logFormat, err)
	}
	for env, want := range map[string]string{
		"CLUSTER":  "redis://a:1?addr=b%3A2&addr=c%3A3",
		"SENTINEL": "redis://a:1?addr=b%3A2&master_set=mymaster",
	} {
		addr := "a:1,b:2,c:3"
		if env == "SENTINEL" {
			addr = "mymaster,a:1,b:2"
		}
		f, err := apply(map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": env, "REDIS_URL": addr, "REDIS_AUTH": "pw"})
		if want = strings.Replace(want, "://", "://:pw@", 1); err != nil || f.redis != want {
			t.Errorf("%s: %q %v, want %q", env, f.redis, err, want)
		}
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BACKEND_TYPE": "memcache"}, "BACKEND_TYPE"},
		{map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"},
		{map[string]string{"REDIS_TYPE": "ring"}, "REDIS_TYPE"},
		{map[string]string{"REDIS_TLS": "sometimes"}, "REDIS_TLS"},
		{map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{map[string]string{"GRPC_UDS": "/x.sock"}, "GRPC_UDS"},
	} {
		if _, err := apply(c.env); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.env, err, c.want)
		}
	}
}

// TestServeEnvoyWithRedisHeld: in the compatibility mode, a Redis whose
// replies never come (a real relay holding them) costs each ShouldRateLimit
// at most the store timeout plus 50 ms (plus what the machine's load kept
// this process from running meanwhile: testkit.Stalls), and every descriptor answers by
// the failure mode of its most specific path: closed is OVER_LIMIT, open
// is OK, both saying the store is unavailable; the default fails the call,
// as envoyproxy/ratelimit does; a request mixing a closed and an open
// descriptor is OVER_LIMIT on the closed one only. /healthcheck says the
// store is failing, and all recovers once the replies flow again.
func TestServeEnvoyWithRedisHeld(t *testing.T) {
	t.Parallel()
	const storeTimeout = 100 * time.Millisecond
	redis := redistest.Start(t)
	relay, err := tcprelay.Start(redis.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	dir := t.TempDir()
	for _, domain := range []string{"closed", "open", "legacy", "mixed"} {
		data := fmt.Sprintf("domain: %s\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 100}\n", domain)
		if domain == "mixed" {
			data += "  - key: path\n    value: /login\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"
		}
		if err := os.WriteFile(filepath.Join(dir, domain+".yaml"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := newSyncBuffer()
	go func() {
		Run(ctx, []string{"serve", "--envoy-config", dir, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
			"--redis", "redis://" + relay.Addr(), "--store-timeout", storeTimeout.String(),
			"--envoy-failure-mode", "closed=closed", "--envoy-failure-mode", "open=open",
			"--envoy-failure-mode", "mixed=open", "--envoy-failure-mode", "mixed.path_/login=closed"}, logs.w, io.Discard)
		logs.w.Close()
	}()
	httpBase := "http://" + logs.addr(t, "serving HTTP")
	rls := rlspb.NewRateLimitServiceClient(dialGRPC(t, logs))
	user := &commonpb.RateLimitDescriptor{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}}
	login := &commonpb.RateLimitDescriptor{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "path", Value: "/login"}}}
	ask := func(domain string) (*rlspb.RateLimitResponse, time.Duration, error) {
		req := &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*commonpb.RateLimitDescriptor{user}}
		if domain == "mixed" {
			req.Descriptors = []*commonpb.RateLimitDescriptor{login, user}
		}
		start := time.Now()
		resp, err := rls.ShouldRateLimit(context.Background(), req)
		return resp, time.Since(start), err
	}
	healthy := func() bool {
		r, err := http.Get(httpBase + "/healthcheck")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	}
	domains := []string{"closed", "open", "legacy", "mixed"}
	stalls := testkit.StartStalls(t)
	// Redis answers (the first call may dial and load the scripts).
	testkit.Eventually(t, 20*time.Second, "every domain answered by Redis", func() bool {
		for _, domain := range domains {
			if resp, _, err := ask(domain); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK || len(resp.ResponseHeadersToAdd) != 0 {
				return false
			}
		}
		return true
	})

	// What the failure modes answered before the hold (a Redis call slower
	// than the store timeout on a loaded machine is answered so too).
	failureSeries := map[string]string{
		"closed": `tokenlimit_envoy_requests_total{code="fail_closed",domain="closed"}`,
		"open":   `tokenlimit_envoy_requests_total{code="fail_open",domain="open"}`,
		"legacy": `tokenlimit_envoy_requests_total{code="unavailable",domain="legacy"}`,
		"mixed":  `tokenlimit_envoy_requests_total{code="fail_closed",domain="mixed"}`,
	}
	before := map[string]float64{}
	for domain, series := range failureSeries {
		before[domain], _ = scrape(t, httpBase, series)
	}
	errorsBefore, _ := scrape(t, httpBase, "tokenlimit_store_errors_total")

	relay.Hold(tcprelay.Replies)
	unavailable := &corepb.HeaderValue{Key: rlsv3.StoreHeader, Value: rlsv3.StoreUnavailable}
	saysUnavailable := func(resp *rlspb.RateLimitResponse) bool {
		return len(resp.ResponseHeadersToAdd) == 1 && proto.Equal(resp.ResponseHeadersToAdd[0], unavailable)
	}
	// Each call may take the store timeout plus 50 ms, plus the time
	// this process was kept from running (stalls: -race, CPU burners,
	// other processes on the machine), which on an idle machine is none.
	var worst time.Duration // the largest excess of a call over the store timeout, stalls aside
	for round := range 8 {  // past the breaker's threshold of 5
		for _, domain := range domains {
			stalledBefore := stalls.Total()
			resp, d, err := ask(domain)
			stalled := stalls.Total() - stalledBefore
			worst = max(worst, d-stalled-storeTimeout)
			switch domain {
			case "closed":
				if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlspb.RateLimitResponse_OVER_LIMIT ||
					!saysUnavailable(resp) || len(resp.RawBody) == 0 {
					t.Errorf("round %d, closed: %v %v, want OVER_LIMIT with %s: %s and a raw_body", round, resp, err, rlsv3.StoreHeader, rlsv3.StoreUnavailable)
				}
			case "open":
				if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK || !saysUnavailable(resp) {
					t.Errorf("round %d, open: %v %v, want OK with %s: %s", round, resp, err, rlsv3.StoreHeader, rlsv3.StoreUnavailable)
				}
			case "legacy":
				if status.Code(err) != codes.Unavailable {
					t.Errorf("round %d, legacy: %v %v, want codes.Unavailable", round, resp, err)
				}
			case "mixed":
				if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || len(resp.Statuses) != 2 ||
					resp.Statuses[0].Code != rlspb.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != rlspb.RateLimitResponse_OK ||
					!saysUnavailable(resp) || len(resp.RawBody) == 0 {
					t.Errorf("round %d, mixed: %v %v, want OVER_LIMIT on path=/login (closed), OK on user (open), with %s: %s and a raw_body",
						round, resp, err, rlsv3.StoreHeader, rlsv3.StoreUnavailable)
				}
			}
			if d > storeTimeout+50*time.Millisecond+stalled {
				t.Errorf("round %d, %s: answered in %v, want within the store timeout %v + 50ms + the %v this process was stalled meanwhile",
					round, domain, d, storeTimeout, stalled)
			}
		}
	}
	t.Logf("the slowest call took the store timeout plus %v, stalls aside", worst)
	if healthy() {
		t.Error("/healthcheck answers OK while Redis' replies are held")
	}
	for domain, series := range failureSeries {
		if got, _ := scrape(t, httpBase, series); got-before[domain] != 8 {
			t.Errorf("/metrics %s: %v, want 8 more than the %v before the hold", series, got, before[domain])
		}
	}
	// The breaker opened after 5 failed calls; the calls it skipped are
	// not store errors (the half-open trials are).
	if got, _ := scrape(t, httpBase, "tokenlimit_breaker_state"); got == 0 {
		t.Error("/metrics: tokenlimit_breaker_state 0 (closed) while Redis' replies are held")
	}
	if got, _ := scrape(t, httpBase, "tokenlimit_store_errors_total"); got-errorsBefore < 5 || got-errorsBefore >= float64(len(domains)*8) {
		t.Errorf("/metrics: tokenlimit_store_errors_total %v (%v before the hold), want the 5 failures that opened the breaker and its trials more, not the calls it skipped",
			got, errorsBefore)
	}

	relay.Release(tcprelay.Replies)
	testkit.Eventually(t, 20*time.Second, "/healthcheck OK once Redis answers again", healthy)
	testkit.Eventually(t, 20*time.Second, "the closed domains answered by Redis again", func() bool {
		for _, domain := range []string{"closed", "mixed"} {
			if resp, _, err := ask(domain); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK || len(resp.ResponseHeadersToAdd) != 0 {
				return false
			}
		}
		return true
	})
}

// scrape returns the value of the series (name and labels as the text
// exposition writes them, labels sorted) in the /metrics page at base,
// and whether it is there.
func scrape(t *testing.T, base, series string) (float64, bool) {
	t.Helper()
	r, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	body, err := io.ReadAll(r.Body)
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", r.StatusCode, err)
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %s: %v", series, err)
			}
			return f, true
		}
	}
	return 0, false
}

// TestServeEnvoyMetricsLogsAndRequestIDs runs the compatibility mode on an
// embedded store that fills up: /metrics counts requests by domain (empty
// for an unconfigured one) and code and hits by stat, with no descriptor
// value; the full store is logged once, not per request; every gRPC call
// gets a request id, the caller's when valid, on the lines logged for it
// and sent back in x-request-id; a fresh one is sent back with an error
// only.
func TestServeEnvoyMetricsLogsAndRequestIDs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeEnvoyDir(t, dir, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := newSyncBuffer()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--envoy-config", dir, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
			"--max-keys", "2", "--log-level", "debug"}, logs.w, io.Discard)
		logs.w.Close()
	}()
	httpBase := "http://" + logs.addr(t, "serving HTTP")
	rls := rlspb.NewRateLimitServiceClient(dialGRPC(t, logs))
	ask := func(domain, user, id string) (*rlspb.RateLimitResponse, string, error) {
		ctx := context.Background()
		if id != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-request-id", id)
		}
		var header metadata.MD
		resp, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*commonpb.RateLimitDescriptor{
			{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
		}}, grpc.Header(&header))
		got := header.Get("x-request-id")
		if len(got) > 1 {
			t.Fatalf("x-request-id %q, want at most one", got)
		}
		return resp, strings.Join(got, ""), err
	}

	// Room for 2 keys (a peek, as the warm-up's, stores none): alice's,
	// twice within the limit then over it, and carol's; bob's finds none.
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		resp, id, err := ask("api", "alice", "")
		if err != nil || resp.OverallCode != want || id != "" {
			t.Fatalf("alice, call %d: %v %v (request id %q), want %v and no id sent back (the fresh one is logged)", i, resp, err, id, want)
		}
	}
	if _, _, err := ask("api", "carol", ""); err != nil {
		t.Fatalf("carol: %v (the second key)", err)
	}
	for i := range 3 {
		_, id, err := ask("api", "bob", fmt.Sprintf("full-%d", i))
		if status.Code(err) != codes.Unavailable || id != fmt.Sprintf("full-%d", i) {
			t.Fatalf("bob %d: %v (request id %q), want codes.Unavailable and the caller's id", i, err, id)
		}
	}
	if _, id, err := ask("web", "alice", "bad id with spaces"); err != nil || id != "" {
		t.Fatalf("an unconfigured domain: %v (request id %q), want OK and no id sent back for an invalid one", err, id)
	}
	_, daveID, err := ask("api", "dave", "")
	if status.Code(err) != codes.Unavailable || len(daveID) != 16 {
		t.Fatalf("dave on the full store: %v (request id %q), want codes.Unavailable and a fresh 16-digit id sent back with the error", err, daveID)
	}

	for series, want := range map[string]float64{
		`tokenlimit_envoy_requests_total{code="ok",domain="api"}`:             3,
		`tokenlimit_envoy_requests_total{code="over_limit",domain="api"}`:     1,
		`tokenlimit_envoy_requests_total{code="key_space_full",domain="api"}`: 4,
		`tokenlimit_envoy_requests_total{code="ok",domain=""}`:                1,
		`tokenlimit_envoy_hits_total{domain="api",stat="total_hits"}`:         4,
		`tokenlimit_envoy_hits_total{domain="api",stat="within_limit"}`:       3,
		`tokenlimit_envoy_hits_total{domain="api",stat="near_limit"}`:         1, // alice's 2nd hit: past 80% of 2
		`tokenlimit_envoy_hits_total{domain="api",stat="over_limit"}`:         1,
		`tokenlimit_envoy_request_seconds_count`:                              9,
		`tokenlimit_breaker_state`:                                            0,
		`tokenlimit_config_reloads_total{result="error"}`:                     0,
	} {
		if got, ok := scrape(t, httpBase, series); !ok || got != want {
			t.Errorf("/metrics %s: %v (present: %v), want %v", series, got, ok, want)
		}
	}
	r, err := http.Get(httpBase + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(r.Body)
	r.Body.Close()
	for _, secret := range []string{"alice", "bob", "carol"} {
		if strings.Contains(string(page), secret) {
			t.Errorf("/metrics mentions the descriptor value %q", secret)
		}
	}

	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("serve: %v", err)
	}
	full, logged := 0, map[string]bool{}
	for line := range logs.lines {
		var rec struct {
			Level, Msg string
			RequestID  string `json:"request_id"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.HasPrefix(rec.Msg, "the store is full") {
			full++
		}
		if rec.Msg == "rls: store failed" && rec.Level != "DEBUG" {
			t.Errorf("a request on the full store logged at %s: %s", rec.Level, line)
		}
		if rec.RequestID != "" {
			logged[rec.RequestID] = true
		}
	}
	if full != 1 {
		t.Errorf("the full store was logged %d times, want once", full)
	}
	for _, id := range []string{"full-0", "full-1", "full-2", daveID} {
		if !logged[id] {
			t.Errorf("no line logged with request_id %s", id)
		}
	}
}

// dialGRPC connects to the gRPC port of the server logging to logs,
// closed when t ends.
func dialGRPC(t *testing.T, logs *syncBuffer) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(logs.addr(t, "serving gRPC (Envoy rate limit service v3)"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
