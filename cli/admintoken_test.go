package cli

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// adminStatus is the status of GET /v1/admin/teams on base with token.
func adminStatus(t *testing.T, base, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/v1/admin/teams", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func writeTokens(t *testing.T, path, content string) {
	t.Helper()
	// Written beside and renamed, as a Secret's volume is updated, so that
	// no read finds the file half written.
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestAdminTokensFileReloads: a running serve takes the tokens of its
// --admin-token @FILE as the file changes: a token removed is refused and
// one added accepted, without a restart; a bad or missing file keeps the
// tokens in force, and no token ever reaches the log.
func TestAdminTokensFileReloads(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "admins")
	writeTokens(t, path, "alice:tok-alice-1\n")
	_, base, logs := startChild(t, nil, "serving HTTP", "serve", "--listen", "127.0.0.1:0", "--grpc-listen", "",
		"--admin-token", "@"+path, "--reload-every", "20ms", "--auth-failures", "100000/min")
	if got := adminStatus(t, base, "tok-alice-1"); got != http.StatusOK {
		t.Fatalf("alice's token at start: %d, want 200", got)
	}
	writeTokens(t, path, "# alice left\nbob:tok-bob-2\n")
	testkit.Eventually(t, 10*time.Second, "bob's token accepted", func() bool { return adminStatus(t, base, "tok-bob-2") == http.StatusOK })
	if got := adminStatus(t, base, "tok-alice-1"); got != http.StatusUnauthorized {
		t.Fatalf("alice's token once removed from the file: %d, want 401", got)
	}
	writeTokens(t, path, "carol tok-carol-3\n")
	testkit.Eventually(t, 10*time.Second, "the bad file logged", func() bool { return strings.Contains(logs.String(), "admin tokens file rejected") })
	if got := adminStatus(t, base, "tok-bob-2"); got != http.StatusOK {
		t.Fatalf("bob's token after a bad file: %d, want 200 (the tokens in force stay)", got)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the missing file logged", func() bool { return strings.Contains(logs.String(), "admin tokens file unreadable") })
	if got := adminStatus(t, base, "tok-bob-2"); got != http.StatusOK {
		t.Fatalf("bob's token with the file gone: %d, want 200", got)
	}
	writeTokens(t, path, "dave:tok-dave-4\n")
	testkit.Eventually(t, 10*time.Second, "dave's token accepted", func() bool { return adminStatus(t, base, "tok-dave-4") == http.StatusOK })
	for _, token := range []string{"tok-alice-1", "tok-bob-2", "tok-carol-3", "tok-dave-4"} {
		if strings.Contains(logs.String(), token) {
			t.Errorf("the log holds the token %s:\n%s", token, logs.String())
		}
	}
}

// TestServeLimitsFailedAdminTokens: serve counts wrong admin tokens per
// client (--auth-failures): past the budget the client gets 429, its
// right token's calls too.
func TestServeLimitsFailedAdminTokens(t *testing.T) {
	t.Parallel()
	_, base, _ := startChild(t, nil, "serving HTTP", "serve", "--listen", "127.0.0.1:0", "--grpc-listen", "",
		"--admin-token", "ops:s3cret", "--auth-failures", "2/h")
	for i, want := range []int{http.StatusUnauthorized, http.StatusUnauthorized, http.StatusTooManyRequests} {
		if got := adminStatus(t, base, "wrong"); got != want {
			t.Fatalf("wrong token %d: %d, want %d", i+1, got, want)
		}
	}
	if got := adminStatus(t, base, "s3cret"); got != http.StatusTooManyRequests {
		t.Fatalf("the right token from the refused client: %d, want 429", got)
	}
}

// TestAdminTokensFileLogsEachChangeOnce: a bad or unreadable file is read
// and logged once per change, however often it is looked at; a good file
// replaces the gate's tokens.
func TestAdminTokensFileLogsEachChangeOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "admins")
	writeTokens(t, path, "alice:tok-a\n")
	logs := &testkit.Buffer{}
	a, err := serverAdminTokens("@"+path, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	a.gate = httpx.NewAdminGate(a.tokens, false, nil)
	passes := func(token string) bool {
		r := httptest.NewRequest(http.MethodGet, "/v1/admin/teams", nil)
		r.RemoteAddr = "127.0.0.1:1"
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		a.gate.Wrap("the admin endpoints", func(http.ResponseWriter, *http.Request) {})(w, r)
		return w.Code == http.StatusOK
	}
	// look is one tick of watch: a reload when the file changed.
	look := func() {
		if a.changed() {
			a.reload()
		}
	}
	steps := []struct {
		what   string
		change func()
		pass   []string
		refuse []string
	}{
		{"unchanged", func() {}, []string{"tok-a"}, nil},
		{"bob replaces alice", func() { writeTokens(t, path, "bob:tok-b\n") }, []string{"tok-b"}, []string{"tok-a"}},
		{"a bad line", func() { writeTokens(t, path, "bob tok-b\n") }, []string{"tok-b"}, nil},
		{"no token", func() { writeTokens(t, path, "# none\n") }, []string{"tok-b"}, nil},
		{"gone", func() { os.Remove(path) }, []string{"tok-b"}, nil},
		{"carol", func() { writeTokens(t, path, "carol:tok-c\n") }, []string{"tok-c"}, []string{"tok-b"}},
	}
	for _, s := range steps {
		s.change()
		for range 3 {
			look()
		}
		for _, tok := range s.pass {
			if !passes(tok) {
				t.Errorf("%s: %s refused, want it accepted", s.what, tok)
			}
		}
		for _, tok := range s.refuse {
			if passes(tok) {
				t.Errorf("%s: %s accepted, want it refused", s.what, tok)
			}
		}
	}
	for msg, want := range map[string]int{"admin tokens reloaded": 2, "admin tokens file rejected": 2, "admin tokens file unreadable": 1} {
		if got := strings.Count(logs.String(), `"msg":"`+msg); got != want {
			t.Errorf("%q logged %d times, want %d (once per change):\n%s", msg, got, want, logs.String())
		}
	}
	if strings.Contains(logs.String(), "tok-") {
		t.Errorf("the log holds a token:\n%s", logs.String())
	}
}

// TestProxyAdminAndKeyFailuresShareABudget: on the proxy, wrong admin
// tokens and wrong api keys from one client draw from one budget of failed
// authentications.
func TestProxyAdminAndKeyFailuresShareABudget(t *testing.T) {
	t.Parallel()
	upstream := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(upstream.Close)
	cfg := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n  - {name: rpm, key: [api_key], algorithm: fixed_window, limit: 100/min}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, base, _ := startChild(t, nil, "proxying", "proxy", "--config", cfg, "--upstream", upstream.URL, "--listen", "127.0.0.1:0",
		"--admin-token", "ops:s3cret", "--auth-failures", "3/h")
	for i := range 2 {
		if got := adminStatus(t, base, "wrong"); got != http.StatusUnauthorized {
			t.Fatalf("wrong admin token %d: %d, want 401", i+1, got)
		}
	}
	chat := func(key string) int {
		req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := chat("sk-wrong"); got != http.StatusUnauthorized {
		t.Fatalf("a wrong api key, the budget's third failure: %d, want 401", got)
	}
	if got := adminStatus(t, base, "s3cret"); got != http.StatusOK {
		t.Fatalf("the right admin token before the budget is spent: %d, want 200", got)
	}
	if got := adminStatus(t, base, "wrong"); got != http.StatusTooManyRequests {
		t.Fatalf("a fourth failure, an admin token: %d, want 429", got)
	}
	if got := chat("sk-wrong"); got != http.StatusTooManyRequests {
		t.Fatalf("an api key from the refused client: %d, want 429", got)
	}
}
