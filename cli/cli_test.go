package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/resilient"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"validate", "../examples/llm-gateway.yaml"}, &out, io.Discard); err != nil {
		t.Fatalf("validate of a good file: %v", err)
	}
	if !strings.Contains(out.String(), "valid") {
		t.Errorf("output %q, want it to say the file is valid", out.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("limits:\n  - name: x\n    algorithm: token_bucket\n    capacity: 10\n    refill: fast\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Run(context.Background(), []string{"validate", bad}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:5: limits[0].refill") {
		t.Errorf("validate of a bad file: %v, want an error naming bad.yaml:5 and limits[0].refill", err)
	}
	one := filepath.Join(t.TempDir(), "one.yaml")
	if err := os.WriteFile(one, []byte("limits:\n  - {name: x, algorithm: fixed_window, limit: 1/s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := Run(context.Background(), []string{"validate", one}, &out, io.Discard); err != nil || out.String() != one+": valid, 1 limit\n" {
		t.Errorf("validate of a one-limit file: %v, %q; want %q", err, out.String(), one+": valid, 1 limit\n")
	}
	if err := Run(context.Background(), []string{"validate"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "FILE") {
		t.Errorf("validate with no file: %v, want an error asking for FILE", err)
	}
}

// TestValidateCostExpressions: the binary compiles cost expressions (CEL);
// one that refers to an unknown variable is named at its line and column.
func TestValidateCostExpressions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	const limit = "limits:\n  - name: weighted\n    algorithm: fixed_window\n    limit: 1000/min\n    cost: {expr: \"input_tokens + 4 * %s\"}\n"
	if err := os.WriteFile(good, fmt.Appendf(nil, limit, "output_tokens"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, fmt.Appendf(nil, limit, "outputs"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"validate", good}, &out, io.Discard); err != nil || out.String() != good+": valid, 1 limit\n" {
		t.Errorf("validate of a cost expression: %v, %q", err, out.String())
	}
	err := Run(context.Background(), []string{"validate", bad}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:5:38: limits[0].cost.expr: undeclared reference to 'outputs'") {
		t.Errorf("validate of an unknown variable: %v, want bad.yaml:5:38 naming it", err)
	}
}

// TestConfigDocValidateOutput runs every `tokenlimit validate FILE` that
// docs/config.md shows and compares what it prints (as the program prints
// it: "tokenlimit: " and the error) with the doc. FILE is the yaml block of
// the doc whose first line is "# FILE", else the repository's file.
func TestConfigDocValidateOutput(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)```yaml\n(# (\\S+)\n.*?)```").FindAllStringSubmatch(string(doc), -1) {
		files[m[2]] = m[1]
	}
	runs := regexp.MustCompile("(?s)```console\n\\$ tokenlimit validate (\\S+)\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	if len(runs) < 2 {
		t.Fatalf("found %d `tokenlimit validate` examples in docs/config.md, want the invalid and the valid one", len(runs))
	}
	dir := t.TempDir()
	for _, run := range runs {
		name, want := run[1], run[2]
		path := filepath.Join("..", name)
		if content, ok := files[name]; ok {
			path = filepath.Join(dir, name)
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		var out bytes.Buffer
		if err := Run(context.Background(), []string{"validate", path}, &out, io.Discard); err != nil {
			fmt.Fprintln(&out, "tokenlimit:", err)
		}
		if got := strings.ReplaceAll(out.String(), path, name); got != want {
			t.Errorf("tokenlimit validate %s prints\n%s\ndocs/config.md says\n%s", name, got, want)
		}
	}
}

// A file with several errors reads, at start and on reload as in validate,
// as a count on a line of its own and then one error a line; one error
// stays one line.
func TestConfigFileErrorsCounted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	two := filepath.Join(dir, "two.yaml")
	one := filepath.Join(dir, "one.yaml")
	for path, content := range map[string]string{
		two: "limits:\n  - name: Bad\n    algorithm: fixed_window\n    limit: fast\n",
		one: "limits:\n  - name: bad\n    algorithm: fixed_window\n    limit: fast\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := (&configFile{path: two}).load()
	want := two + ": 2 errors:\n" + two + ":2: limits[0].name: "
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), "\n") != 2 {
		t.Errorf("load of a file with two errors: %v, want it to start %q and hold three lines", err, want)
	}
	_, err = (&configFile{path: one}).load()
	if want := one + ":4: limits[0].limit: "; err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("load of a file with one error: %v, want one line starting %q", err, want)
	}
}

func TestBadFlagsNameTheFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--trusted-proxy", "not-a-cidr"}, "--trusted-proxy"},
		{[]string{"serve", "--listen", "nonsense:port:x", "--grpc-listen", ""}, "--listen"},
		{[]string{"serve", "--redis", "mysql://x"}, "--redis"},
		{[]string{"check", "-d", "novalue"}, "--descriptor"},
		{[]string{"serve", "--store-timeout", "soon"}, "store-timeout"},
		{[]string{"serve", "--store-timeout", "-1s", "--listen", "127.0.0.1:0", "--grpc-listen", ""}, "--store-timeout: must be positive"},
		{[]string{"serve", "--store-timeout", "0s", "--listen", "127.0.0.1:0", "--grpc-listen", ""}, "--store-timeout: must be positive"},
		{[]string{"serve", "--max-keys", "-5", "--listen", "127.0.0.1:0", "--grpc-listen", ""}, "--max-keys: must be positive"},
		{[]string{"serve", "--fail-open-keys", "0", "--listen", "127.0.0.1:0", "--grpc-listen", ""}, "--fail-open-keys: must be positive"},
		{[]string{"proxy", "--fail-open-keys", "-1", "--config", "../examples/proxy.yaml", "--upstream", "http://127.0.0.1:1"}, "--fail-open-keys: must be positive"},
		{[]string{"serve", "--reload-every", "-1s", "--listen", "127.0.0.1:0", "--grpc-listen", ""}, "--reload-every: must not be negative"},
		{[]string{"serve", "--gc-heap-floor", "-1", "--listen", "127.0.0.1:0", "--grpc-listen", ""}, "--gc-heap-floor: must not be negative"},
		{[]string{"proxy", "--store-timeout", "-1s", "--config", "../examples/proxy.yaml", "--upstream", "http://127.0.0.1:1"}, "--store-timeout: must be positive"},
		{[]string{"serve", "--envoy-config", "testdata", "--store-timeout", "-1s"}, "--store-timeout: must be positive"},
		{[]string{"proxy", "--auth-failures", "ten/min", "--config", "../examples/proxy.yaml", "--upstream", "http://127.0.0.1:1"}, `--auth-failures "ten/min": want a positive whole number`},
		{[]string{"proxy", "--auth-failures", "5/0.1ms", "--config", "../examples/proxy.yaml", "--upstream", "http://127.0.0.1:1"}, `--auth-failures "5/0.1ms": period: must be at least 1ms`},
	} {
		err := Run(context.Background(), tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

// TestFailOpenKeysFlag: --fail-open-keys, on serve and proxy, is the
// service's FailOpenKeys, the fail-open memory's bound; by default the
// bound it had before the flag.
func TestFailOpenKeysFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, resilient.DefaultBound}, {[]string{"--fail-open-keys", "250000"}, 250000}} {
		var f storeFlags
		fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		f.register(fl)
		if err := fl.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := f.serviceOptions().FailOpenKeys; got != tc.want {
			t.Errorf("%v: FailOpenKeys %d, want %d", tc.args, got, tc.want)
		}
	}
}

// syncBuffer collects a server's log lines while the test reads them.
type syncBuffer struct {
	lines chan string
	w     *io.PipeWriter
}

func newSyncBuffer() *syncBuffer {
	r, w := io.Pipe()
	b := &syncBuffer{lines: make(chan string, 100), w: w}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			b.lines <- sc.Text()
		}
		close(b.lines)
	}()
	return b
}

// addr waits for the log line with msg and returns its addr field.
func (b *syncBuffer) addr(t *testing.T, msg string) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line, ok := <-b.lines:
			if !ok {
				t.Fatalf("the server stopped before logging %q", msg)
			}
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg {
				return rec.Addr
			}
		case <-timeout:
			t.Fatalf("no %q log line", msg)
		}
	}
}

func TestServeAnswersChecksAndShutsDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	logs := newSyncBuffer()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--admin-token", "secret"}, logs.w, io.Discard)
		logs.w.Close()
	}()
	base := "http://" + logs.addr(t, "serving HTTP")
	logs.addr(t, "serving gRPC (Envoy rate limit service v3)")

	// The built-in quickstart: chat then three embeds empty the bucket.
	for i, route := range []string{"/v1/chat", "/v1/embed", "/v1/embed", "/v1/embed", "/v1/embed"} {
		var out bytes.Buffer
		err := Run(context.Background(), []string{"check", "--server", base, "-d", "user=alice", "-d", "route=" + route}, &out, io.Discard)
		if denied := i == 4; (err != nil) != denied {
			t.Fatalf("check %d (%s): %v, want denied=%v; output %s", i, route, err, denied, out.String())
		}
	}
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"inspect", "--server", base, "--admin-token", "secret", "-d", "user=alice"}, &out, io.Discard); err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if !strings.Contains(out.String(), "llm-budget") {
		t.Errorf("inspect output %s, want the llm-budget limit", out.String())
	}
	if err := Run(context.Background(), []string{"reset", "--server", base, "--admin-token", "secret", "-d", "user=alice"}, io.Discard, io.Discard); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if err := Run(context.Background(), []string{"check", "--server", base, "-d", "user=alice", "-d", "route=/v1/embed"}, io.Discard, io.Discard); err != nil {
		t.Fatalf("check after reset: %v, want allowed", err)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `tokenlimit_decisions_total{limit="llm-budget",result="denied"} 1`) {
		t.Errorf("/metrics lacks the denial:\n%s", metrics)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("serve returned %v after shutdown", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not shut down")
	}
}

// TestServeReloadsTheConfigFile: a changed file is picked up, a bad one is
// rejected and counted while the running limits stay.
func TestServeReloadsTheConfigFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "limits.yaml")
	write := func(text string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil { // atomic, as editors and config managers do
			t.Fatal(err)
		}
	}
	write("limits:\n  - name: one\n    key: [user]\n    algorithm: fixed_window\n    limit: 10/s\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := newSyncBuffer()
	go func() {
		_ = Run(ctx, []string{"serve", "--config", path, "--listen", "127.0.0.1:0", "--grpc-listen", "", "--reload-every", "20ms"}, logs.w, io.Discard)
		logs.w.Close()
	}()
	base := "http://" + logs.addr(t, "serving HTTP")
	limits := func() (version int, names []string) {
		t.Helper()
		resp, err := http.Get(base + "/v1/limits")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			ConfigVersion int `json:"config_version"`
			Limits        []struct{ Name string }
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		for _, l := range body.Limits {
			names = append(names, l.Name)
		}
		return body.ConfigVersion, names
	}
	if v, names := limits(); v != 1 || len(names) != 1 || names[0] != "one" {
		t.Fatalf("at start: version %d limits %v, want version 1 with [one]", v, names)
	}
	write("limits:\n  - name: two\n    key: [user]\n    algorithm: fixed_window\n    limit: 20/s\n")
	testkit.Eventually(t, 20*time.Second, "the new file to load", func() bool { v, names := limits(); return v == 2 && len(names) == 1 && names[0] == "two" })

	write("limits:\n  - name: three\n    algorithm: nonsense\n")
	testkit.Eventually(t, 20*time.Second, "the bad file to be rejected", func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		m, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(m), `tokenlimit_config_reloads_total{result="error"} 1`)
	})
	if v, names := limits(); v != 2 || len(names) != 1 || names[0] != "two" {
		t.Fatalf("after a bad file: version %d limits %v, want the running version 2 with [two]", v, names)
	}
}

// TestServeOnRedisSentinelAndCluster runs serve against a real Sentinel and a
// real Cluster through --redis URLs, as production does.
func TestServeOnRedisSentinelAndCluster(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "mymaster")
	cluster := redistest.StartCluster(t, 3)
	addrs := cluster.Addrs()
	for name, url := range map[string]string{
		"sentinel": "redis://" + sentinel.Addr() + "?master_set=mymaster",
		"cluster":  "redis://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2],
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			logs := newSyncBuffer()
			go func() {
				_ = Run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--redis", url, "--store-timeout", "2s"}, logs.w, io.Discard)
				logs.w.Close()
			}()
			base := "http://" + logs.addr(t, "serving HTTP")
			// Three embeds of 3 on a bucket of 10 refilling 2/s: 7, 4 and 1
			// left, plus what the refill brought back meanwhile (a loaded
			// machine can take seconds between the calls).
			start := time.Now()
			for i, want := range []int64{7, 4, 1} {
				resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"descriptors":{"user":"alice","route":"/v1/embed"}}`))
				if err != nil {
					t.Fatal(err)
				}
				var body struct {
					Allowed bool
					Limits  []struct {
						Remaining int64
						FailOpen  bool `json:"fail_open"`
					}
				}
				err = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				most := min(7, want+int64(math.Ceil(2*time.Since(start).Seconds())))
				if err != nil || !body.Allowed || len(body.Limits) != 1 || body.Limits[0].FailOpen {
					t.Fatalf("check %d: %+v %v, want allowed by Redis", i, body, err)
				}
				if r := body.Limits[0].Remaining; r < want || r > most {
					t.Fatalf("check %d: %d left, want %d to %d", i, r, want, most)
				}
			}
			// Two limits (the hard cap and the bucket), in two slots on Cluster:
			// 1 token left, so the hard cap admits and the bucket too.
			resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"descriptors":{"user":"alice","route":"/v1/sensitive"}}`))
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || strings.Count(string(out), `"fail_open":false`) != 2 {
				t.Fatalf("a check of two limits: %s %s, want 200 decided by Redis", resp.Status, out)
			}
		})
	}
}

func TestBenchLoadsAServerAndSummarizes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := newSyncBuffer()
	go func() {
		_ = Run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", ""}, logs.w, io.Discard)
		logs.w.Close()
	}()
	base := "http://" + logs.addr(t, "serving HTTP")
	var out bytes.Buffer
	err := Run(context.Background(), []string{"bench", "--server", base, "--duration", "700ms", "--concurrency", "4", "--users", "3", "-d", "route=/v1/embed"}, &out, io.Discard)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	// 3 users × a bucket of 10 refilling 2/s, embeds costing 3: most are
	// denied. Not a terminal: no progress bar, no carriage return.
	for _, want := range []string{"loading " + base + "/v1/check for 700ms", "decisions/s", "allowed ", "denied ", "failed 0", "latency p50"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.ContainsAny(out.String(), "\r#") {
		t.Errorf("bench output into a buffer has a progress bar:\n%q", out.String())
	}
	// On a terminal, the bar redraws its line.
	out.Reset()
	f := benchFlags{server: base, duration: 300 * time.Millisecond, concurrency: 1, users: 1}
	if err := runBench(context.Background(), f, &out, true); err != nil {
		t.Fatalf("bench on a terminal: %v", err)
	}
	if !strings.HasPrefix(out.String(), "\r[") {
		t.Errorf("bench output on a terminal lacks the progress bar:\n%q", out.String())
	}
	// The bar counts allowed and denied answers as they come; its last
	// drawing agrees with the summary.
	bars := strings.Split(strings.SplitN(out.String(), "\n", 2)[0], "\r")
	var allowed, denied, failed int
	if _, err := fmt.Sscanf(bars[len(bars)-1][strings.Index(bars[len(bars)-1], "allowed"):], "allowed %d  denied %d  failed %d", &allowed, &denied, &failed); err != nil {
		t.Fatalf("the progress bar's last drawing %q: %v", bars[len(bars)-1], err)
	}
	if summary := fmt.Sprintf("allowed %d, denied %d, failed %d", allowed, denied, failed); !strings.Contains(out.String(), summary) || allowed+denied == 0 {
		t.Errorf("the progress bar ends at %q, want the summary's counts, some decided:\n%s", summary, out.String())
	}
	for _, args := range [][]string{{"bench", "--duration", "0s"}, {"bench", "--concurrency", "0"}, {"bench", "--users", "0"}} {
		if err := Run(context.Background(), args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), args[1]) {
			t.Errorf("%v: %v, want an error naming %s", args, err, args[1])
		}
	}
}

// Against a server that does not answer, bench reports no decisions, not
// its failed attempts, and says why they failed.
func TestBenchAgainstNothingReportsTheError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every connection is refused
	var out bytes.Buffer
	err = Run(context.Background(), []string{"bench", "--server", "http://" + addr, "--duration", "200ms", "--concurrency", "1"}, &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("bench against nothing: %v, want an error saying the connection was refused", err)
	}
	for _, want := range []string{"0 decisions in ", ": 0 decisions/s", "allowed 0, denied 0, failed ", "first failure: ", "connection refused"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "failed 0\n") {
		t.Errorf("bench against nothing counted no failure:\n%s", out.String())
	}
}

// check's exit status tells allowed, denied, a bad request and no decision
// apart.
func TestCheckExitCodes(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n  - name: one\n    key: [user]\n    algorithm: fixed_window\n    limit: 1/1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base, _, stop := startServeLogged(t, "--config", cfg)
	defer stop()
	code := func(args ...string) int {
		return ExitCode(Run(context.Background(), append([]string{"check", "--server", base}, args...), io.Discard, io.Discard))
	}
	if got := code("-d", "user=a"); got != ExitOK {
		t.Errorf("allowed: exit %d, want %d", got, ExitOK)
	}
	if got := code("-d", "user=a"); got != ExitDenied {
		t.Errorf("denied: exit %d, want %d", got, ExitDenied)
	}
	if got := code("-d", "user="+strings.Repeat("x", 300)); got != ExitUsage {
		t.Errorf("a value the server refuses (400): exit %d, want %d", got, ExitUsage)
	}
	if got := code("--nonsense"); got != ExitUsage {
		t.Errorf("an unknown flag: exit %d, want %d", got, ExitUsage)
	}
	if got := code("-d", "novalue"); got != ExitUsage {
		t.Errorf("a bad descriptor flag: exit %d, want %d", got, ExitUsage)
	}
	for status, want := range map[int]int{429: ExitDenied, 400: ExitUsage, 401: ExitUsage, 503: ExitUnreachable, 500: ExitUnreachable, 302: ExitUnreachable} {
		if got := statusExit(status); got != want {
			t.Errorf("status %d: exit %d, want %d", status, got, want)
		}
	}
	err := Run(context.Background(), []string{"check", "--server", "http://127.0.0.1:1", "-d", "user=a"}, io.Discard, io.Discard)
	if got := ExitCode(err); got != ExitUnreachable || !strings.Contains(err.Error(), "no answer") {
		t.Errorf("unreachable: exit %d (%v), want %d", got, err, ExitUnreachable)
	}
}

// TestServeStartsWithoutRedis: serve started against a closed port listens
// at once, says on /readyz which store fails, answers each limit by its
// failure mode from the first request, and once a redis-server starts on
// that port decides on Redis, with no restart.
func TestServeStartsWithoutRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Stop() // its port is closed now; Restart opens it again
	cfg := filepath.Join(t.TempDir(), "limits.yaml")
	const yml = `limits:
  - name: open
    match: {route: /open}
    key: [user]
    algorithm: fixed_window
    limit: 100/h
    fail_open_share: 0.5
  - name: closed
    match: {route: /closed}
    key: [user]
    algorithm: fixed_window
    limit: 100/h
    failure_mode: closed
`
	if err := os.WriteFile(cfg, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := newSyncBuffer()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
			"--redis", srv.URL(), "--store-timeout", "2s", "--reload-every", "0"}, logs.w, io.Discard)
		logs.w.Close()
	}()
	base := "http://" + logs.addr(t, "serving HTTP")
	grpcAddr := logs.addr(t, "serving gRPC (Envoy rate limit service v3)")
	if conn, err := net.Dial("tcp", grpcAddr); err != nil {
		t.Errorf("gRPC port %s: %v", grpcAddr, err)
	} else {
		conn.Close()
	}

	type answer struct {
		code int
		body struct {
			Allowed bool
			Limits  []struct {
				Name     string
				Limit    int64
				FailOpen bool `json:"fail_open"`
			}
		}
	}
	check := func(route string) answer {
		t.Helper()
		resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"descriptors":{"user":"alice","route":"`+route+`"}}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		a := answer{code: resp.StatusCode}
		if err := json.NewDecoder(resp.Body).Decode(&a.body); err != nil {
			t.Fatalf("check %s: %s: %v", route, resp.Status, err)
		}
		return a
	}
	readyz := func() (int, map[string]any) {
		t.Helper()
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}

	// Redis unreachable: failure modes from the first request.
	if code, body := readyz(); code != http.StatusServiceUnavailable || body["store"] != "redis" || !strings.Contains(fmt.Sprint(body["error"]), srv.Addr()) {
		t.Errorf("/readyz with Redis unreachable: %d %v, want 503 naming the redis store and its address", code, body)
	}
	if a := check("/open"); a.code != http.StatusOK || !a.body.Allowed || len(a.body.Limits) != 1 || !a.body.Limits[0].FailOpen || a.body.Limits[0].Limit != 50 {
		t.Errorf("fail-open limit with Redis unreachable: %d %+v, want 200 allowed on the local budget of 50", a.code, a.body)
	}
	if a := check("/closed"); a.code != http.StatusServiceUnavailable || a.body.Allowed {
		t.Errorf("fail-closed limit with Redis unreachable: %d %+v, want 503", a.code, a.body)
	}

	// Redis starts on that port: serve picks it up by itself.
	srv.Restart()
	testkit.Eventually(t, 20*time.Second, "a fail-closed check decided by Redis", func() bool {
		a := check("/closed")
		return a.code == http.StatusOK && a.body.Allowed && len(a.body.Limits) == 1 && !a.body.Limits[0].FailOpen && a.body.Limits[0].Limit == 100
	})
	if a := check("/open"); a.code != http.StatusOK || len(a.body.Limits) != 1 || a.body.Limits[0].FailOpen || a.body.Limits[0].Limit != 100 {
		t.Errorf("fail-open limit with Redis up: %d %+v, want decided by Redis with its limit of 100", a.code, a.body)
	}
	if n, err := srv.Do("DBSIZE"); err != nil || n == "0" {
		t.Errorf("DBSIZE = %q, %v; want the budgets in Redis", n, err)
	}
	testkit.Eventually(t, 20*time.Second, "/readyz ok", func() bool { code, _ := readyz(); return code == http.StatusOK })

	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("serve returned %v after shutdown", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not shut down")
	}
}
