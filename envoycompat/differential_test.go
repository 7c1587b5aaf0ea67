package envoycompat_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenlimit/tokenlimit/envoycompat"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// envoyRatelimitModule is the envoyproxy/ratelimit build the differential
// test compares against; scripts/test.sh installs it.
const envoyRatelimitModule = "github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36"

// envoyBinary finds envoyproxy/ratelimit's service_cmd: $ENVOY_RATELIMIT,
// or where go install puts it (testkit.GoTool).
func envoyBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ENVOY_RATELIMIT"); p != "" {
		return p
	}
	return testkit.GoTool(t, "service_cmd", envoyRatelimitModule)
}

// freePort returns a port nothing listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// diffCase is one engine case renamed into its own domains.
type diffCase struct {
	name  string
	files []string
	reqs  []envoycompat.Request
}

var domainLine = regexp.MustCompile(`(?m)^domain: (\S+)`)

// diffCases are the engine cases whose behaviour needs no global setting
// beyond those given, each in domains of its own, plus a random sequence.
func diffCases() []diffCase {
	var out []diffCase
	for i, c := range engineCases {
		if c.opts.GlobalShadowMode || c.opts.GlobalQuotaMode || c.opts.Headers != nil || c.opts.KeyPrefix != "" {
			continue // global settings: see TestDifferentialSettings
		}
		prefix := fmt.Sprintf("c%d-", i)
		dc := diffCase{name: c.name}
		for _, f := range c.files {
			dc.files = append(dc.files, domainLine.ReplaceAllString(f, "domain: "+prefix+"$1"))
		}
		for _, call := range c.calls {
			r := call.req
			if r.Domain != "" {
				r.Domain = prefix + r.Domain
			}
			dc.reqs = append(dc.reqs, r)
		}
		out = append(out, dc)
	}
	return append(out, randomCase(1), randomCase(2))
}

// randomCase is a random sequence of requests over nested, wildcard and
// key-only descriptors with random hits_addend at both levels.
func randomCase(seed uint64) diffCase {
	rng := rand.New(rand.NewPCG(seed, 99))
	domain := fmt.Sprintf("random%d", seed)
	file := `domain: ` + domain + `
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 6}
    descriptors:
      - key: route
        value: "/v1/*"
        rate_limit: {unit: hour, requests_per_unit: 9, name: v1}
      - key: route
        value: /v1/chat
        rate_limit: {unit: hour, requests_per_unit: 4, name: chat, replaces: [{name: v1}]}
      - key: route
        shadow_mode: true
        rate_limit: {unit: day, requests_per_unit: 3}
  - key: user
    value: root
    rate_limit: {unlimited: true}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 5}
`
	users := []string{"alice", "bob", "root"}
	routes := []string{"/v1/chat", "/v1/embed", "/v2/x"}
	entries := func() []envoycompat.Entry {
		u := envoycompat.Entry{Key: "user", Value: users[rng.IntN(len(users))]}
		switch rng.IntN(4) {
		case 0:
			return []envoycompat.Entry{u}
		case 1:
			return []envoycompat.Entry{{Key: "tenant", Value: "t"}, u}
		}
		return []envoycompat.Entry{u, {Key: "route", Value: routes[rng.IntN(len(routes))]}}
	}
	var reqs []envoycompat.Request
	for range 40 {
		r := envoycompat.Request{Domain: domain, HitsAddend: uint32(rng.IntN(3))}
		for range 1 + rng.IntN(3) {
			d := envoycompat.Descriptor{Entries: entries()}
			if rng.IntN(3) == 0 {
				h := uint64(rng.IntN(3))
				d.HitsAddend = &h
			}
			r.Descriptors = append(r.Descriptors, d)
		}
		reqs = append(reqs, r)
	}
	return diffCase{name: "random sequence " + strconv.FormatUint(seed, 10), files: []string{file}, reqs: reqs}
}

func toProto(r envoycompat.Request) *rlspb.RateLimitRequest {
	out := &rlspb.RateLimitRequest{Domain: r.Domain, HitsAddend: r.HitsAddend}
	for _, d := range r.Descriptors {
		pd := &commonpb.RateLimitDescriptor{}
		for _, e := range d.Entries {
			pd.Entries = append(pd.Entries, &commonpb.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		if d.HitsAddend != nil {
			pd.HitsAddend = wrapperspb.UInt64(*d.HitsAddend)
		}
		if d.Limit != nil {
			pd.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: typepb.RateLimitUnit(d.Limit.Unit)}
		}
		out.Descriptors = append(out.Descriptors, pd)
	}
	return out
}

// pair is envoyproxy/ratelimit and tokenlimit, each on its own Redis, with
// the same configuration directory and the same settings.
type pair struct {
	envoy, tokenlimit   rlspb.RateLimitServiceClient
	envoyJSON, tlJSON   string // the POST /json URLs
	envoyRedis, tlRedis *redistest.Server
}

// startPair writes files into a runtime directory and starts both
// services on it with env (envoyproxy/ratelimit's variables; tokenlimit
// reads them through --envoy-env).
func startPair(t *testing.T, files []string, env map[string]string) *pair {
	t.Helper()
	bin := envoyBinary(t)
	root := t.TempDir()
	confDir := filepath.Join(root, "rl", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		if err := os.WriteFile(filepath.Join(confDir, fmt.Sprintf("f%03d.yaml", i)), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := &pair{envoyRedis: redistest.Start(t), tlRedis: redistest.Start(t)}
	common := map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "rl", "RUNTIME_APPDIRECTORY": "config",
		"REDIS_SOCKET_TYPE": "tcp", "USE_STATSD": "false", "LOG_LEVEL": "warn", "MERGE_DOMAIN_CONFIG": "true",
	}
	for k, v := range env {
		common[k] = v
	}
	p.envoy, p.envoyJSON = startEnvoy(t, bin, common, p.envoyRedis.Addr())
	p.tokenlimit, p.tlJSON = startTokenlimit(t, common, p.tlRedis.Addr())
	return p
}

func dial(t *testing.T, target string) rlspb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// waitReady waits until c answers a request for a domain no file names.
func waitReady(t *testing.T, c rlspb.RateLimitServiceClient, exited <-chan struct{}, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	probe := &rlspb.RateLimitRequest{Domain: "probe-unconfigured", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ShouldRateLimit(ctx, probe)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("the server exited before it was ready:\n%s", logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 60 s: %v\n%s", err, logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startEnvoy(t *testing.T, bin string, env map[string]string, redisAddr string) (rlspb.RateLimitServiceClient, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "rls.sock")
	cmd := exec.Command(bin)
	port := freePort(t)
	cmd.Env = append(os.Environ(), "REDIS_URL="+redisAddr, "GRPC_UDS="+sock, "HOST=127.0.0.1", "PORT="+port, "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+freePort(t))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logs := &testkit.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	c := dial(t, "unix://"+sock)
	waitReady(t, c, exited, logs.String)
	return c, "http://127.0.0.1:" + port + "/json"
}

// buildTokenlimit builds cmd/tokenlimit of this repository into a
// temporary directory and returns the binary's path. The command is its own
// module in the repository's workspace, so the build runs from the root.
func buildTokenlimit(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tokenlimit")
	build := exec.Command("go", "build", "-o", bin, "./cmd/tokenlimit")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tokenlimit: %v\n%s", err, out)
	}
	return bin
}

// startTokenlimit runs tokenlimit serve --envoy-env as a process with env
// and returns a client of its gRPC port and its POST /json URL.
func startTokenlimit(t *testing.T, env map[string]string, redisAddr string) (rlspb.RateLimitServiceClient, string) {
	t.Helper()
	// The answers are compared, not the faults: a store timeout far above a
	// loaded machine's slowest call keeps every answer the store's.
	cmd := exec.Command(buildTokenlimit(t), "serve", "--envoy-env", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
		"--store-timeout", "10s")
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "REDIS_URL="+redisAddr, "LOG_LEVEL=info") // the address is in an info line
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		w.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	addr, httpAddr := make(chan string, 1), make(chan string, 1)
	logs := &testkit.Buffer{}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && strings.HasPrefix(rec.Msg, "serving gRPC") {
				addr <- rec.Addr
			}
			if rec.Msg == "serving HTTP" {
				httpAddr <- rec.Addr
			}
		}
	}()
	select {
	case a := <-addr:
		c := dial(t, a)
		waitReady(t, c, exited, logs.String)
		return c, "http://" + <-httpAddr + "/json"
	case <-exited:
		t.Fatalf("tokenlimit serve --envoy-env exited before serving gRPC:\n%s", logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("tokenlimit serve --envoy-env: no gRPC address after 60 s:\n%s", logs.String())
	}
	return nil, ""
}

// postJSON sends req to a POST /json endpoint and returns the status code
// and the decoded answer (nil unless the body is a response).
func postJSON(t *testing.T, url string, req *rlspb.RateLimitRequest) (int, *rlspb.RateLimitResponse, string) {
	t.Helper()
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	data, _ := io.ReadAll(r.Body)
	var resp rlspb.RateLimitResponse
	if protojson.Unmarshal(data, &resp) != nil {
		return r.StatusCode, nil, string(data)
	}
	return r.StatusCode, &resp, ""
}

// compare runs c's requests on both services, every third through POST
// /json and the others over gRPC, and reports every answer that differs. Each attempt starts from empty Redis servers at the start
// of a wall-clock second and counts only if it ended in that same second,
// so both services see the same windows and the same time until reset;
// an attempt that straddles a second is run again.
func (p *pair) compare(t *testing.T, c diffCase) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p.envoyRedis.Do("FLUSHALL")
		p.tlRedis.Do("FLUSHALL")
		now := time.Now()
		time.Sleep(now.Truncate(time.Second).Add(time.Second).Sub(now)) // the next second starts
		start := time.Now().Unix()
		var diffs []string
		for i, r := range c.reqs {
			req := toProto(r)
			if i%3 == 2 {
				wcode, want, wbody := postJSON(t, p.envoyJSON, req)
				hcode, have, hbody := postJSON(t, p.tlJSON, req)
				if wcode != hcode || wbody != hbody || !proto.Equal(want, have) {
					diffs = append(diffs, fmt.Sprintf("request %d %v over /json:\n envoy:      %d %v %q\n tokenlimit: %d %v %q", i, req, wcode, want, wbody, hcode, have, hbody))
				}
				continue
			}
			want, werr := p.envoy.ShouldRateLimit(context.Background(), req)
			have, herr := p.tokenlimit.ShouldRateLimit(context.Background(), req)
			switch {
			case (werr == nil) != (herr == nil):
				diffs = append(diffs, fmt.Sprintf("request %d %v:\n envoy: %v %v\n tokenlimit: %v %v", i, req, want, werr, have, herr))
			case werr != nil:
				if ws, hs := status.Convert(werr), status.Convert(herr); ws.Code() != hs.Code() || ws.Message() != hs.Message() {
					diffs = append(diffs, fmt.Sprintf("request %d %v: envoy error %v, tokenlimit error %v", i, req, werr, herr))
				}
			case !proto.Equal(want, have):
				diffs = append(diffs, fmt.Sprintf("request %d %v:\n envoy:      %v\n tokenlimit: %v", i, req, want, have))
			}
		}
		if time.Now().Unix() != start {
			t.Logf("%s: attempt %d straddled a second; running it again", c.name, attempt)
			if attempt == 10 {
				t.Fatalf("%s: 10 attempts each straddled a second; the machine is too slow for this comparison", c.name)
			}
			continue
		}
		if len(diffs) > 0 && windowsStartTogether(start) {
			// A documented difference (docs/rls.md): envoyproxy/ratelimit's
			// counter keys carry a window's start but not its unit, so
			// budgets of one descriptor in two units share a counter while
			// their windows start at the same second; tokenlimit keeps them
			// apart.
			for _, d := range diffs {
				t.Logf("%s: differs while two units' windows start together (known): %s", c.name, d)
			}
			return
		}
		for _, d := range diffs {
			t.Errorf("%s: %s", c.name, d)
		}
		return
	}
}

// windowsStartTogether reports whether, at unix second sec, the current
// windows of two of the units (second, minute, hour, day) start at the same
// second: the first second of a minute, the first minute of an hour, the
// first hour of a UTC day.
func windowsStartTogether(sec int64) bool {
	return sec%60 == 0 || sec%3600 < 60 || sec%86400 < 3600
}

// TestDifferential feeds envoyproxy/ratelimit and tokenlimit serve
// --envoy-env the same configuration and the same requests, over every
// feature of the configuration format, and requires equal answers.
func TestDifferential(t *testing.T) {
	cases := diffCases()
	var files []string
	for _, c := range cases {
		files = append(files, c.files...)
	}
	invalid := diffCase{name: "invalid requests", reqs: []envoycompat.Request{rq("", desc("k=v")), rq("c0-d"), rq("", desc("k=v"))}}
	p := startPair(t, files, nil)
	for _, c := range append(cases, invalid) {
		p.compare(t, c)
	}
}

// TestDifferentialSettings compares the global settings: SHADOW_MODE,
// LIMIT_RESPONSE_HEADERS_ENABLED with custom header names, CACHE_KEY_PREFIX.
func TestDifferentialSettings(t *testing.T) {
	c := randomCase(3)
	c.reqs = append(c.reqs, rq(c.reqs[0].Domain, desc("user=alice", "route=/v1/chat"), desc("user=bob")))
	p := startPair(t, c.files, map[string]string{
		"SHADOW_MODE": "true", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_REMAINING_HEADER": "X-Left", "CACHE_KEY_PREFIX": "pre_",
	})
	p.compare(t, c)
}
