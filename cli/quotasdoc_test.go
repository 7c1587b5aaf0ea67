package cli

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// TestQuotasDocCommands runs the admin commands of docs/quotas.md's
// walk-through, in order, against a tokenlimit serve started with the
// page's configuration: each must succeed as written (the documented key
// id replaced by the one the server gave). The proxy's calls, which need
// an upstream, are not run here.
func TestQuotasDocCommands(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/quotas.md")
	if err != nil {
		t.Fatal(err)
	}
	cfg := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindSubmatch(doc)
	if cfg == nil {
		t.Fatal("docs/quotas.md has no yaml block")
	}
	path := filepath.Join(t.TempDir(), "quotas.yaml")
	if err := os.WriteFile(path, cfg[1], 0o600); err != nil {
		t.Fatal(err)
	}
	_, base, _ := startChild(t, []string{"TOKENLIMIT_ALERT_SECRET=s"}, "serving HTTP",
		"serve", "--config", path, "--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-token", "secret")
	keyID := regexp.MustCompile(`key_[0-9a-f]{24}`)
	var created string
	ran := 0
	for _, line := range strings.Split(string(doc), "\n") {
		cmd, ok := strings.CutPrefix(line, "$ tokenlimit ")
		if !ok || strings.HasPrefix(cmd, "serve ") || strings.HasPrefix(cmd, "proxy ") {
			continue
		}
		args := shellWords(t, cmd)
		for i := range args {
			args[i] = keyID.ReplaceAllString(args[i], created)
		}
		args = append(args, "--server", base, "--admin-token", "secret")
		var out, errb bytes.Buffer
		if err := Run(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("tokenlimit %s: %v\n%s", cmd, err, errb.String())
		}
		ran++
		if strings.HasPrefix(cmd, "keys create ") {
			var k struct{ ID string }
			if err := json.Unmarshal(out.Bytes(), &k); err != nil || k.ID == "" {
				t.Fatalf("tokenlimit %s printed %q", cmd, out.String())
			}
			created = k.ID
		}
	}
	if ran < 5 {
		t.Fatalf("ran %d commands of docs/quotas.md, want its 5 admin commands at least", ran)
	}
}

// shellWords splits a command line as sh does for words, single and
// double quotes, and a trailing # comment; nothing else is expanded.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			end := strings.IndexByte(line[i+1:], c)
			if end < 0 {
				t.Fatalf("unbalanced quote in %q", line)
			}
			cur.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return words
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// docLine returns the one line of doc starting with prefix, failing t if
// there is not exactly one.
func docLine(t *testing.T, doc, prefix string) string {
	t.Helper()
	var found []string
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, prefix) {
			found = append(found, line)
		}
	}
	if len(found) != 1 {
		t.Fatalf("docs/quotas.md has %d lines starting %q, want 1", len(found), prefix)
	}
	return found[0]
}

// docBody returns the JSON body of the first line of doc holding prefix
// (a curl command's -d '…').
func docBody(t *testing.T, doc, prefix string) string {
	t.Helper()
	i := strings.Index(doc, prefix)
	if i < 0 {
		t.Fatalf("docs/quotas.md has no %q", prefix)
	}
	body, _, _ := strings.Cut(doc[i+len("-d '"):], "'")
	return body
}

// TestQuotasDocWalkThrough does what docs/quotas.md walks an operator
// through, with its configuration, commands and request bodies, on
// tokenlimit serve and tokenlimit proxy sharing one redis-server, the
// proxy's upstream a stand-in that answers every chat completion with 10
// prompt tokens and all of its max_tokens: a team on plan pro with a $50
// monthly budget, two keys, four calls of $10.000025 spending $40.0001
// (the fourth crossing 80%: its answer's header, one signed webhook
// event, the proxy's counter), the usage as explain prints it, the fifth
// call refused naming the team's budget, the budget raised keeping what
// was spent, and a key revoked and refused.
func TestQuotasDocWalkThrough(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/quotas.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	const hookSecret = "hook-secret-456"
	var hooks struct {
		sync.Mutex
		bodies, signatures []string
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hooks.Lock()
		hooks.bodies = append(hooks.bodies, string(body))
		hooks.signatures = append(hooks.signatures, r.Header.Get("X-Tokenlimit-Signature"))
		hooks.Unlock()
	}))
	defer receiver.Close()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			MaxTokens int64 `json:"max_tokens"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "length"}], "usage": {"prompt_tokens": 10, "completion_tokens": %d, "total_tokens": %d}}`, req.MaxTokens, req.MaxTokens+10)
	}))
	defer upstream.Close()

	cfg := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(doc)
	if cfg == nil || !strings.Contains(cfg[1], "http://127.0.0.1:19000/tokenlimit") {
		t.Fatal("docs/quotas.md has no yaml block with its webhook")
	}
	path := filepath.Join(t.TempDir(), "quotas.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(cfg[1], "http://127.0.0.1:19000", receiver.URL, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	redis := redistest.Start(t)
	env := []string{"TOKENLIMIT_REDIS_URL=" + redis.URL(), "TOKENLIMIT_ADMIN_TOKEN=secret", "TOKENLIMIT_ALERT_SECRET=" + hookSecret}
	// The page's command lines, with a long store timeout: a loaded
	// machine must not make Redis look down.
	_, serve, _ := startChild(t, env, "serving HTTP", "serve", "--config", path, "--listen", "127.0.0.1:0", "--grpc-listen", "", "--store-timeout", "10s")
	_, proxy, proxyLogs := startChild(t, env, "proxying", "proxy", "--config", path, "--upstream", upstream.URL, "--listen", "127.0.0.1:0",
		"--metrics-listen", "127.0.0.1:0", "--store-timeout", "10s")

	// run runs the page's command that starts with prefix, the page's
	// key id (laptop's) replaced by the one this server gave laptop.
	var laptop struct{ ID, Secret string }
	keyID := regexp.MustCompile(`key_[0-9a-f]{24}`)
	run := func(prefix string) string {
		t.Helper()
		line := docLine(t, doc, "$ tokenlimit "+prefix)
		args := append(shellWords(t, strings.TrimPrefix(line, "$ tokenlimit ")), "--server", serve, "--admin-token", "secret")
		for i := range args {
			args[i] = keyID.ReplaceAllString(args[i], laptop.ID)
		}
		var out, errb bytes.Buffer
		if err := Run(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, errb.String())
		}
		return out.String()
	}
	run("teams create acme --plan pro")
	if err := json.Unmarshal([]byte(run("keys create laptop")), &laptop); err != nil || laptop.Secret == "" {
		t.Fatalf("keys create laptop: %+v %v", laptop, err)
	}
	code, ci := call(t, http.MethodPost, serve+"/v1/admin/keys", docBody(t, doc, `-d '{"name": "ci"`))
	ciSecret, _ := ci["secret"].(string)
	if code != http.StatusCreated || ciSecret == "" {
		t.Fatalf("the page's curl creating ci: %d %v", code, ci)
	}

	// Both keys were created through serve: the proxy has them once it
	// has followed Redis' stream (its admin API reads the same plane).
	for _, id := range []string{laptop.ID, ci["id"].(string)} {
		testkit.Eventually(t, 5*time.Second, "key "+id+" on the proxy", func() bool {
			code, _ := call(t, http.MethodGet, proxy+"/v1/admin/keys/"+id, "")
			return code == http.StatusOK
		})
	}
	chat := docBody(t, doc, `-d '{"model": "gpt-4o"`)
	spend := func(secret string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, proxy+"/v1/chat/completions", strings.NewReader(chat))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res, string(body)
	}
	for i, secret := range []string{laptop.Secret, ciSecret, laptop.Secret, ciSecret} {
		res, body := spend(secret)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d %s", i+1, res.StatusCode, body)
		}
		if left := res.Header.Get("X-Ratelimit-Remaining-Usd"); i == 0 && left != "39.999975" {
			t.Errorf("the first call leaves $%s of the month, the page says 39.999975", left)
		}
		alert := res.Header.Get("X-Tokenlimit-Alert")
		if want := map[bool]string{true: "usd-monthly;threshold=80%", false: ""}[i == 3]; alert != want {
			t.Errorf("call %d: X-Tokenlimit-Alert %q, want %q", i+1, alert, want)
		}
	}

	explain := run("explain key_")
	if !slices.ContainsFunc(strings.Split(explain, "\n"), func(line string) bool {
		f := strings.Fields(line)
		return len(f) == 8 && slices.Equal(f[:7], strings.Fields("team acme usd-monthly usd $40.0001 $50.00 $9.9999"))
	}) {
		t.Errorf("explain printed\n%s\nwant the team's usd-monthly at $40.0001 of $50.00, $9.9999 left", explain)
	}

	// One event, signed, for the 80% threshold.
	testkit.Eventually(t, 10*time.Second, "the webhook's event", func() bool { hooks.Lock(); defer hooks.Unlock(); return len(hooks.bodies) > 0 })
	hooks.Lock()
	bodies, signatures := append([]string(nil), hooks.bodies...), append([]string(nil), hooks.signatures...)
	hooks.Unlock()
	var event struct {
		EventID                 string `json:"event_id"`
		Limit, Level, Threshold string
		Used                    int64
		LimitValue              int64     `json:"limit_value"`
		PeriodEnd               time.Time `json:"period_end"`
	}
	if err := json.Unmarshal([]byte(bodies[0]), &event); err != nil || len(bodies) != 1 || event.EventID == "" ||
		event.Limit != "usd-monthly" || event.Level != "acme" || event.Threshold != "80%" || event.Used != 40_000_095 || event.LimitValue != 50_000_000 || event.PeriodEnd.IsZero() {
		t.Errorf("the webhook got %q (%v), want one event: the team acme's usd-monthly past 80%%, $40.000095 of $50", bodies, err)
	}
	mac := hmac.New(sha256.New, []byte(hookSecret))
	mac.Write([]byte(bodies[0]))
	if want := "sha256=" + hex.EncodeToString(mac.Sum(nil)); signatures[0] != want {
		t.Errorf("the event is signed %q, want %q", signatures[0], want)
	}
	metrics := regexp.MustCompile(`"msg":"serving metrics","addr":"([^"]+)"`).FindStringSubmatch(proxyLogs.String())
	if metrics == nil {
		t.Fatalf("the proxy logged no metrics address:\n%s", proxyLogs.String())
	}
	res, err := http.Get("http://" + metrics[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	exposition, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(exposition), `tokenlimit_alerts_total{limit="usd-monthly",threshold="80%"} 1`) {
		t.Error(`the proxy's /metrics has no tokenlimit_alerts_total{limit="usd-monthly",threshold="80%"} 1`)
	}
	if !strings.Contains(proxyLogs.String(), `"msg":"budget threshold crossed"`) {
		t.Error("the proxy logged no budget threshold crossed")
	}
	for _, secret := range []string{laptop.Secret, ciSecret} {
		if part := secret[len("tl-") : len("tl-")+16]; strings.Contains(string(exposition), part) || strings.Contains(proxyLogs.String(), part) || strings.Contains(bodies[0], part) {
			t.Error("the proxy's metrics, its log or the webhook's event holds (part of) a key's secret")
		}
	}

	// The fifth call is refused, naming the team's budget.
	res, body := spend(ciSecret)
	var denial struct {
		Error struct{ Message, Code string }
	}
	json.Unmarshal([]byte(body), &denial)
	if res.StatusCode != http.StatusTooManyRequests || denial.Error.Code != "insufficient_quota" ||
		!strings.HasPrefix(denial.Error.Message, `team "acme" budget "usd-monthly" exhausted: $40.0001 of $50.00 used, resets `) {
		t.Errorf("the fifth call: %d %s, want 429 insufficient_quota naming the team acme's usd-monthly", res.StatusCode, body)
	}

	// Raised mid-month, the budget keeps what was spent.
	run("teams update acme")
	code, usage := call(t, http.MethodGet, serve+"/v1/admin/teams/acme/usage", "")
	limits, _ := usage["limits"].([]any)
	if got, _ := json.Marshal(limits); code != http.StatusOK || len(limits) != 1 ||
		!strings.Contains(string(got), `"limit":100000000`) || !strings.Contains(string(got), `"used":40000100`) || !strings.Contains(string(got), `"remaining":59999900`) {
		t.Errorf("the team's usage after raising its budget: %d %s, want $40.0001 used of $100", code, got)
	}

	// Revoked, the key is refused by the proxy.
	run("keys revoke key_")
	testkit.Eventually(t, time.Second, "the revoked key refused by the proxy", func() bool {
		res, body := spend(laptop.Secret)
		return res.StatusCode == http.StatusUnauthorized && strings.Contains(body, `"code":"invalid_api_key"`)
	})
}
