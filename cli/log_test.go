package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// logLines collects a server's log output; waitFor waits for a line.
type logLines struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{}
}

func newLogLines() *logLines { return &logLines{written: make(chan struct{}, 1)} }

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	select {
	case l.written <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *logLines) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSuffix(l.buf.String(), "\n"), "\n")
}

// waitFor returns the first submatch of re in the log, waiting for it.
func (l *logLines) waitFor(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		for _, line := range l.lines() {
			if m := re.FindStringSubmatch(line); m != nil {
				return m[1]
			}
		}
		select {
		case <-l.written:
		case <-timeout:
			t.Fatalf("no log line matches %s:\n%s", re, strings.Join(l.lines(), "\n"))
		}
	}
}

// startServeLogged runs serve with args until the test ends, and returns its base
// URL and its log.
func startServeLogged(t *testing.T, args ...string) (string, *logLines, func()) {
	t.Helper()
	logs := newLogLines()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", ""}, args...), logs, io.Discard)
	}()
	stop := func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("serve: %v", err)
		}
	}
	t.Cleanup(func() { cancel() })
	addr := logs.waitFor(t, regexp.MustCompile(`serving HTTP.*?addr[=":]+([0-9.]+:[0-9]+)`))
	return "http://" + addr, logs, stop
}

func request(t *testing.T, method, url, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		req.Header.Set(name, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// At the default settings a burst of denials writes a handful of lines, not
// one per request; the startup line names the config, the number of limits
// and the store; the reload counters exist from the start. (Not parallel:
// the burst would load the machine under the other tests' store timeouts.)
func TestServeLogsStayQuietUnderABurstOfDenials(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n  - name: hard-cap\n    key: [user]\n    algorithm: sliding_log\n    limit: 5/1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base, logs, stop := startServeLogged(t, "--config", cfg)
	const burst = 2000
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < burst; i += 4 {
				if i%2 == 0 {
					request(t, http.MethodPost, base+"/v1/check", `{"descriptors": {"user": "alice", "route": "/v1/sensitive"}}`)
				} else {
					request(t, http.MethodGet, base+"/v1/forward-auth", "", "X-User: alice", "X-Original-URI: /v1/sensitive")
				}
			}
		})
	}
	wg.Wait()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`tokenlimit_decisions_total{limit="hard-cap",result="denied"} 1995`,
		`tokenlimit_config_reloads_total{result="ok"} 0`,
		`tokenlimit_config_reloads_total{result="error"} 0`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	stop()
	lines := logs.lines()
	t.Logf("%d requests wrote %d log lines", burst, len(lines))
	if len(lines) > 30 {
		t.Errorf("%d requests (%d denied) wrote %d log lines, want at most 30:\n%s", burst, burst-5, len(lines), strings.Join(lines[:40], "\n"))
	}
	if !strings.Contains(lines[0], `"msg":"starting","config":"`+cfg+`","limits":1,"store":"memory"`) {
		t.Errorf("first line %s, want the startup line naming config, limits and store", lines[0])
	}
}

// At debug every decision is logged, each line of a request with its
// request id: the client's X-Request-Id when valid, else a generated one,
// returned in the answer; durations are in milliseconds.
func TestServeLogsCarryTheRequestID(t *testing.T) {
	t.Parallel()
	base, logs, stop := startServeLogged(t, "--log-level", "debug", "--log-format", "text")
	check := `{"descriptors": {"user": "bo", "route": "/v1/sensitive"}}`
	for range 5 {
		request(t, http.MethodPost, base+"/v1/check", check)
	}
	resp := request(t, http.MethodPost, base+"/v1/check", check, "X-Request-Id: trace-42.a:b")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Request-Id") != "trace-42.a:b" {
		t.Fatalf("status %d, X-Request-Id %q, want 429 and the client's id", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}
	resp = request(t, http.MethodGet, base+"/v1/forward-auth", "", "X-User: bo", "X-Original-URI: /v1/sensitive", "X-Request-Id: has space\"quote")
	generated := resp.Header.Get("X-Request-Id")
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(generated) {
		t.Fatalf("X-Request-Id %q for an invalid client id, want a generated one", generated)
	}
	line := logs.waitFor(t, regexp.MustCompile(`(.*request_id=trace-42\.a:b.*)`))
	for _, want := range []string{"level=DEBUG", `msg="rate-limit decision"`, "op=check", "allowed=false", "limit=hard-cap", "retry_after_ms="} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %s lacks %s", line, want)
		}
	}
	logs.waitFor(t, regexp.MustCompile(`(op=forward-auth .*request_id=`+generated+`)`))
	stop()
}

func TestLogFlagsAreChecked(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--log-level", "loud"},
		{"serve", "--log-format", "xml"},
		{"proxy", "--log-level", "loud"},
	} {
		err := Run(context.Background(), args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), args[1]) {
			t.Errorf("%v: %v, want an error naming %s", args, err, args[1])
		}
	}
}

// A full embedded store is logged once, at error, however many requests it
// then refuses (each a 429 key_space_full, counted in the metrics).
func TestServeLogsAFullStoreOnce(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n  - name: per-user\n    key: [user]\n    algorithm: fixed_window\n    limit: 100/1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base, logs, stop := startServeLogged(t, "--config", cfg, "--max-keys", "1")
	if resp := request(t, http.MethodPost, base+"/v1/check", `{"descriptors": {"user": "alice"}}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice: %d, want 200 (the one key)", resp.StatusCode)
	}
	for _, user := range []string{"bob", "carol", "dave", "erin"} {
		if resp := request(t, http.MethodPost, base+"/v1/check", `{"descriptors": {"user": "`+user+`"}}`); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s: %d, want 429 key_space_full", user, resp.StatusCode)
		}
	}
	stop()
	full := 0
	for _, line := range logs.lines() {
		if strings.Contains(line, `"msg":"the store is full`) {
			full++
			if !strings.Contains(line, `"level":"ERROR"`) {
				t.Errorf("the full store logged as %s, want at error", line)
			}
		}
	}
	if full != 1 {
		t.Errorf("the full store was logged %d times for 4 refused requests, want once:\n%s", full, strings.Join(logs.lines(), "\n"))
	}
}
