package cli

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/snapshot"
)

// budgetsConfig has a calendar day's quota and a spend-like hour: both
// long enough to be kept across a restart.
const budgetsConfig = `
limits:
  - {name: daily, key: [user], algorithm: fixed_window, limit: 1000/day, calendar: day}
`

// TestBudgetsSurviveRestart: with --data-dir, the embedded store's daily
// budget keeps what was charged across a graceful restart (SIGTERM), and
// across a SIGKILL once a snapshot holding the charge was written (the
// most a crash loses is what was charged since the last snapshot, written
// every snapshot.DefaultInterval).
func TestBudgetsSurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(cfg, []byte(budgetsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	args := []string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--config", cfg, "--data-dir", data}
	remaining := func(base string, cost int) float64 {
		t.Helper()
		code, body := call(t, http.MethodPost, base+"/v1/check", `{"descriptors": {"user": "alice"}, "cost": `+strconv.Itoa(cost)+`}`)
		if code != http.StatusOK {
			t.Fatalf("check: %d %v", code, body)
		}
		return body["limits"].([]any)[0].(map[string]any)["remaining"].(float64)
	}

	cmd, base := child(t, args...)
	if r := remaining(base, 100); r != 900 {
		t.Fatalf("first charge: remaining %v, want 900", r)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}

	cmd, base = child(t, args...)
	if r := remaining(base, 50); r != 850 {
		t.Fatalf("after a graceful restart: remaining %v, want 850", r)
	}
	// Wait for a snapshot holding the second charge, then crash.
	path := filepath.Join(data, snapshot.FileName)
	deadline := time.Now().Add(4 * snapshot.DefaultInterval)
	for snapshotCount(t, path) != 150 {
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot holding 150 within %v", 4*snapshot.DefaultInterval)
		}
		time.Sleep(50 * time.Millisecond) // polling the file, not waiting out the interval
	}
	cmd.Process.Kill()
	cmd.Wait()

	_, base = child(t, args...)
	if r := remaining(base, 1); r != 849 {
		t.Fatalf("after SIGKILL: remaining %v, want 849", r)
	}
}

// snapshotCount is the daily budget's count in the snapshot at path, 0 if there
// is none yet.
func snapshotCount(t *testing.T, path string) int64 {
	t.Helper()
	saved, err := snapshot.Read(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0
		}
		t.Fatal(err)
	}
	for _, b := range saved {
		if strings.HasPrefix(b.Key, "daily|") {
			return b.State[1]
		}
	}
	return 0
}

// TestProxyBudgetsSurviveRestart: tokenlimit proxy with --data-dir keeps
// its calendar budgets, a daily token quota and a daily spend in dollars,
// across a graceful restart (SIGTERM): the same key (kept in the plane's
// log) is charged on from what it had spent, not from a whole budget.
func TestProxyBudgetsSurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(cfg, []byte(`
prices:
  gpt-4o: {input: 2.50, output: 10.00}
limits:
  - {name: tokens-per-key-day, key: [api_key], algorithm: fixed_window, limit: 1000000/day, calendar: day, cost: request}
  - {name: spend-per-key-day, key: [api_key], unit: usd, algorithm: fixed_window, limit: 5.00/day, calendar: day}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	upstream := httptest.NewServer(&credentialLog{}) // 9 prompt and 1 completion tokens a call
	defer upstream.Close()
	args := []string{"proxy", "--config", cfg, "--upstream", upstream.URL, "--upstream-key", "sk-upstream",
		"--listen", "127.0.0.1:0", "--admin-token", "secret", "--data-dir", filepath.Join(dir, "data")}
	// remaining calls the proxy with secret and returns what its answer
	// says is left of the tokens and the dollars.
	remaining := func(base, secret string) (tokens, usd string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("a call: %d", res.StatusCode)
		}
		return res.Header.Get("X-Ratelimit-Remaining-Tokens"), res.Header.Get("X-Ratelimit-Remaining-Usd")
	}

	cmd, base, _ := startChild(t, nil, "proxying", args...)
	code, key := call(t, http.MethodPost, base+"/v1/admin/keys", `{"name": "k"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/admin/keys: %d %v", code, key)
	}
	secret := key["secret"].(string)
	for i, want := range [][2]string{{"999990", "4.999967"}, {"999980", "4.999934"}} {
		if tokens, usd := remaining(base, secret); tokens != want[0] || usd != want[1] {
			t.Fatalf("call %d: %s tokens and $%s left, want %s and $%s", i+1, tokens, usd, want[0], want[1])
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}

	_, base, _ = startChild(t, nil, "proxying", args...)
	if tokens, usd := remaining(base, secret); tokens != "999970" || usd != "4.999901" {
		t.Fatalf("after a graceful restart: %s tokens and $%s left, want 999970 and $4.999901 (the day's spend kept)", tokens, usd)
	}
}
