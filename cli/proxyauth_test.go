package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// openAISDK returns the path of the official openai SDK's driver
// (proxy/testdata/openai-sdk/drive.mjs), failing under CI=true, else
// skipping, when node or the SDK is missing.
func openAISDK(t *testing.T) string {
	t.Helper()
	dir, _ := filepath.Abs("../proxy/testdata/openai-sdk")
	_, nodeErr := exec.LookPath("node")
	_, sdkErr := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json"))
	if nodeErr != nil || sdkErr != nil {
		msg := "node or the openai SDK missing (scripts/test.sh installs them: npm ci in " + dir + ")"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPED: " + msg)
	}
	return filepath.Join(dir, "drive.mjs")
}

// credentialLog is a fake OpenAI upstream that answers every chat call
// and records the credentials each call carried.
type credentialLog struct {
	mu    sync.Mutex
	calls []string // "Authorization|x-api-key" of each call
}

func (c *credentialLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.calls = append(c.calls, r.Header.Get("Authorization")+"|"+r.Header.Get("X-Api-Key"))
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`)
}

func (c *credentialLog) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// chatWith calls base's chat completions with secret and returns the status.
func chatWith(t *testing.T, base, secret string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestProxyReplicasRefuseARevokedKey: two proxies on one Redis, each
// holding the upstream's key (one from $TOKENLIMIT_UPSTREAM_KEY, one from
// --upstream-key). The official openai SDK calls the first with a key
// created through its admin API and succeeds; once the key is deleted
// through the second, the SDK raises AuthenticationError within 1 s, and
// both replicas refuse the key. The upstream saw the proxies' key only, and
// no log line holds the secret or the upstream's key.
func TestProxyReplicasRefuseARevokedKey(t *testing.T) {
	t.Parallel()
	script := openAISDK(t)
	redis := redistest.Start(t)
	up := &credentialLog{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	cfg := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n  - {name: tokens, key: [api_key], algorithm: token_bucket, capacity: 1000000, refill: 1000000/min, cost: request}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const upstreamKey = "sk-upstream-held-by-the-proxy"
	args := []string{"proxy", "--config", cfg, "--upstream", upstream.URL, "--redis", redis.URL(), "--listen", "127.0.0.1:0",
		"--admin-token", "secret", "--log-level", "debug"}
	_, a, logsA := startChild(t, []string{"TOKENLIMIT_UPSTREAM_KEY=" + upstreamKey}, "proxying", args...)
	_, b, logsB := startChild(t, nil, "proxying", append(args, "--upstream-key", upstreamKey)...)

	code, key := call(t, http.MethodPost, a+"/v1/admin/keys", `{"name": "sdk"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/admin/keys: %d %v", code, key)
	}
	id, secret := key["id"].(string), key["secret"].(string)
	testkit.Eventually(t, 10*time.Second, "the second replica serves the new key", func() bool {
		return chatWith(t, b, secret) == http.StatusOK
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sdk := exec.CommandContext(ctx, "node", script, "untilUnauthorized")
	sdk.Env = append(os.Environ(), "BASE_URL="+a, "API_KEY="+secret, "MAX_RETRIES=")
	sdk.Stderr = os.Stderr
	out, err := sdk.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sdk.Start(); err != nil {
		t.Fatal(err)
	}
	defer sdk.Wait()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	if first := <-lines; first != `{"ok":true}` {
		t.Fatalf("the SDK's first call: %s, want a success", first)
	}
	if code, body := call(t, http.MethodDelete, b+"/v1/admin/keys/"+id, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE on the second replica: %d %v", code, body)
	}
	revoked := time.Now()
	var last string
	for line := range lines {
		last = line
		if line != `{"ok":true}` {
			break
		}
	}
	took := time.Since(revoked)
	var r struct {
		Class  string
		Status int
		Code   string
	}
	if err := json.Unmarshal([]byte(last), &r); err != nil || r.Class != "AuthenticationError" || r.Status != http.StatusUnauthorized || r.Code != "invalid_api_key" {
		t.Fatalf("the SDK ended with %s (%v), want AuthenticationError 401 invalid_api_key", last, err)
	}
	t.Logf("the SDK was refused %v after the deletion", took)
	if took > time.Second {
		t.Errorf("the SDK was refused %v after the key was deleted, want within 1 s", took)
	}
	for _, base := range []string{a, b} {
		if code := chatWith(t, base, secret); code != http.StatusUnauthorized {
			t.Errorf("%s after the deletion: %d, want 401", base, code)
		}
	}

	seen := up.seen()
	if len(seen) < 2 {
		t.Fatalf("the upstream got %d calls, want the SDK's and the second replica's", len(seen))
	}
	for i, c := range seen {
		if c != "Bearer "+upstreamKey+"|" {
			t.Fatalf("upstream call %d carried %q, want only the proxies' key", i, c)
		}
	}
	for name, logs := range map[string]*testkit.Buffer{"first": logsA, "second": logsB} {
		text := logs.String()
		if strings.Contains(text, secret[len("tl-"):len("tl-")+8]) || strings.Contains(text, upstreamKey) {
			t.Errorf("the %s replica logged the key's secret or the upstream's key:\n%s", name, text)
		}
		if !strings.Contains(text, id) {
			t.Errorf("the %s replica's logs never name the key %s:\n%s", name, id, text)
		}
	}
}

// TestProxyReplicasRefuseAnExpiredKey: two tokenlimit proxy processes on
// one Redis. A key created through the first with an expiry 3 s away is
// served by the second; once it expires, each proxy refuses it (401)
// within a second of its expiry, and neither before it.
func TestProxyReplicasRefuseAnExpiredKey(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	upstream := httptest.NewServer(&credentialLog{})
	defer upstream.Close()
	cfg := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n  - {name: tokens, key: [api_key], algorithm: token_bucket, capacity: 1000000, refill: 1000000/min, cost: request}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"proxy", "--config", cfg, "--upstream", upstream.URL, "--upstream-key", "sk-upstream", "--redis", redis.URL(),
		"--listen", "127.0.0.1:0", "--admin-token", "secret"}
	_, a, _ := startChild(t, nil, "proxying", args...)
	_, b, _ := startChild(t, nil, "proxying", args...)

	// RFC 3339 to the millisecond.
	expiry := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	code, key := call(t, http.MethodPost, a+"/v1/admin/keys", `{"name": "short", "expires_at": "`+expiry.UTC().Format(time.RFC3339Nano)+`"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/admin/keys: %d %v", code, key)
	}
	secret := key["secret"].(string)
	answersWithin(t, time.Now(), time.Second, "an expiring key created on A, used on B", http.StatusOK, func() int { return chatWith(t, b, secret) })
	refusedWithinASecondOfExpiry(t, expiry, map[string]string{"A": a, "B": b}, func(base string) int { return chatWith(t, base, secret) })
}
