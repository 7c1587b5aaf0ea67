package gateways_test

// The gateway examples run here as shipped, in a real NGINX and a real Caddy
// (Debian's nginx-light and caddy packages; scripts/test.sh installs them),
// in front of a real `tokenlimit serve` and a small upstream. Only their
// addresses are rewritten: 127.0.0.1:8000, :8080 and :9000 (and Caddy's
// admin localhost:2019) become free ports, so that the tests do not collide
// with whatever else runs on the machine. Without the binaries the tests skip
// loudly, except when CI=true: then they fail.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/cli"
)

// testConfig has a limit for each thing a client must not choose: the route
// (by its weight), the client address, and the cost.
const testConfig = `
limits:
  # The route's weight is the cost: an embedding is 3, a chat 1.
  - name: per-user
    key: [user]
    algorithm: token_bucket
    capacity: 100
    refill: 1/1h
    cost: {by: route, weights: {/v1/chat: 1, /v1/embed: 3}, default: 1}
  # The request's own cost (X-Cost), per client address.
  - name: per-ip
    match: {route: /v1/embed}
    key: [ip]
    algorithm: token_bucket
    capacity: 1000
    refill: 1/1h
    cost: request
  - name: hard-cap
    match: {route: /v1/sensitive}
    key: [user]
    algorithm: sliding_log
    limit: 1/1h
`

const adminToken = "gateway-test-token"

// The addresses the examples use.
const (
	gatewayAddr    = "127.0.0.1:8000"
	tokenlimitAddr = "127.0.0.1:8080"
	upstreamAddr   = "127.0.0.1:9000"
	caddyAdminAddr = "localhost:2019"
)

// fixture is one gateway running an example in front of tokenlimit and the
// upstream.
type fixture struct {
	gateway    string // base URL
	tokenlimit string // base URL
}

func TestNginx(t *testing.T) {
	nginx := binary(t, "nginx", "/usr/sbin/nginx")
	t.Run("example", func(t *testing.T) {
		exercise(t, func(t *testing.T, ports map[string]string) {
			startNginx(t, nginx, example(t, "nginx.conf", ports, nil))
		})
	})
	t.Run("unreachable", func(t *testing.T) {
		unreachable(t, "nginx.conf", nginxFailOpen, func(t *testing.T, conf string) { startNginx(t, nginx, conf) })
	})
}

func TestCaddy(t *testing.T) {
	caddy := binary(t, "caddy", "/usr/bin/caddy")
	t.Run("example", func(t *testing.T) {
		exercise(t, func(t *testing.T, ports map[string]string) {
			startCaddy(t, caddy, example(t, "Caddyfile", ports, nil))
		})
	})
	t.Run("unreachable", func(t *testing.T) {
		unreachable(t, "Caddyfile", caddyFailOpen, func(t *testing.T, conf string) { startCaddy(t, caddy, conf) })
	})
}

// The fail-open variants, as the files' comments describe them: the one line
// (or block) that answers 503 replaced by a proxy_pass to the API.
var (
	nginxFailOpen = [2]string{
		`            return 503 '{"error":{"message":"the rate limiter is unreachable; retry later"}}\n';`,
		`            proxy_pass http://api;`,
	}
	caddyFailOpen = [2]string{
		"\t\t\theader Cache-Control no-store\n\t\t\theader Content-Type application/json\n" +
			"\t\t\t# Fail closed, with a 503:\n" +
			"\t\t\trespond `{\"error\":{\"message\":\"the rate limiter is unreachable; retry later\"}}` 503\n",
		"\t\t\treverse_proxy 127.0.0.1:9000\n",
	}
)

// exercise starts tokenlimit and the upstream on free ports, the gateway
// through start, and checks what a client sees and what tokenlimit charged.
func exercise(t *testing.T, start func(t *testing.T, ports map[string]string)) {
	ports := freePorts(t)
	f := fixture{gateway: "http://" + ports[gatewayAddr], tokenlimit: "http://" + ports[tokenlimitAddr]}
	startTokenlimit(t, ports[tokenlimitAddr])
	startUpstream(t, ports[upstreamAddr])
	start(t, ports)
	waitListening(t, ports[gatewayAddr])
	loopbackOnly(t, ports[gatewayAddr])

	// Allowed: the API's answer, with tokenlimit's headers. The client's
	// route, cost and address headers change nothing: the embedding costs 3
	// on ann's budget and 1 on the per-ip budget of the real address.
	spoof := []string{"X-Forwarded-Uri: /v1/chat", "X-Original-URI: /v1/chat", "X-Cost: 500",
		"X-Forwarded-For: 203.0.113.9", "X-Real-IP: 203.0.113.9", "Forwarded: for=203.0.113.9"}
	for i, want := range []string{"97", "94"} {
		r := f.get(t, "/v1/embed?n="+strconv.Itoa(i), append([]string{"X-User: ann"}, spoof...)...)
		r.wantStatus(t, http.StatusOK)
		if r.body != "upstream: GET /v1/embed?n="+strconv.Itoa(i)+"\n" {
			t.Fatalf("body %q, want the upstream's answer", r.body)
		}
		r.wantHeader(t, "X-RateLimit-Limit", "100")
		r.wantHeader(t, "X-RateLimit-Remaining", want)
		r.wantPrefix(t, "RateLimit", `"per-user";r=`+want+`;t=`)
		r.wantHeader(t, "RateLimit-Policy", `"per-user";q=100;w=360000`)
		r.wantHeader(t, "Retry-After", "")
	}
	f.wantRemaining(t, "per-user", `{"user": "ann"}`, 94)
	f.wantRemaining(t, "per-ip", `{"ip": "`+clientIP+`", "route": "/v1/embed"}`, 998)
	f.wantRemaining(t, "per-ip", `{"ip": "203.0.113.9", "route": "/v1/embed"}`, 1000)

	// A request no limit selects passes with no rate-limit headers.
	r := f.get(t, "/v1/free")
	r.wantStatus(t, http.StatusOK)
	for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy"} {
		r.wantHeader(t, h, "")
	}

	// Denied: 429 with Retry-After, the same headers and tokenlimit's JSON.
	f.get(t, "/v1/sensitive", "X-User: bob").wantStatus(t, http.StatusOK)
	r = f.get(t, "/v1/sensitive", "X-User: bob")
	r.wantStatus(t, http.StatusTooManyRequests)
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 3500 || s > 3600 {
		t.Errorf("Retry-After %q, want the hour the sliding log waits", r.header.Get("Retry-After"))
	}
	r.wantHeader(t, "X-RateLimit-Limit", "1")
	r.wantHeader(t, "X-RateLimit-Remaining", "0")
	r.wantPrefix(t, "RateLimit", `"hard-cap";r=0;t=`)
	r.wantHeader(t, "RateLimit-Policy", `"hard-cap";q=1;w=3600`)
	r.wantHeader(t, "Content-Type", "application/json")
	var d struct {
		Allowed *bool `json:"allowed"`
		Limits  []struct {
			Name    string `json:"name"`
			Allowed bool   `json:"allowed"`
		} `json:"limits"`
	}
	if err := json.Unmarshal([]byte(r.body), &d); err != nil || d.Allowed == nil || *d.Allowed || len(d.Limits) != 2 ||
		d.Limits[1].Name != "hard-cap" || d.Limits[1].Allowed {
		t.Fatalf("429 body %q (%v), want tokenlimit's decision denied by hard-cap", r.body, err)
	}
}

// unreachable runs the example with nothing listening at tokenlimit's
// address: it answers 503 with a JSON error, and its fail-open variant
// passes the request to the API.
func unreachable(t *testing.T, file string, failOpen [2]string, start func(t *testing.T, conf string)) {
	for _, open := range []bool{false, true} {
		t.Run(map[bool]string{false: "fail closed", true: "fail open"}[open], func(t *testing.T) {
			ports := freePorts(t) // tokenlimit's stays free
			startUpstream(t, ports[upstreamAddr])
			var edit *[2]string
			if open {
				edit = &failOpen
			}
			start(t, example(t, file, ports, edit))
			waitListening(t, ports[gatewayAddr])
			r := fixture{gateway: "http://" + ports[gatewayAddr]}.get(t, "/v1/embed", "X-User: ann")
			if open {
				r.wantStatus(t, http.StatusOK)
				if r.body != "upstream: GET /v1/embed\n" {
					t.Fatalf("fail-open body %q, want the upstream's answer", r.body)
				}
				return
			}
			r.wantStatus(t, http.StatusServiceUnavailable)
			r.wantHeader(t, "Content-Type", "application/json")
			if !strings.Contains(r.body, `{"error":{"message":"the rate limiter is unreachable; retry later"}}`) {
				t.Fatalf("fail-closed body %q", r.body)
			}
		})
	}
}

// binary finds a gateway's binary, or skips the test (fails it with CI=true).
func binary(t *testing.T, name, debianPath string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if _, err := os.Stat(debianPath); err == nil {
		return debianPath
	}
	msg := name + " not found on PATH nor at " + debianPath + ": install it with apt-get install " +
		map[string]string{"nginx": "nginx-light", "caddy": "caddy"}[name] + ", or run scripts/test.sh"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Log("\n" + strings.Repeat("!", 72) + "\nSKIPPING THE GATEWAY TEST: " + msg + "\n" + strings.Repeat("!", 72))
	t.Skip(msg)
	return ""
}

// freePorts maps each address of the examples to a free loopback port.
func freePorts(t *testing.T) map[string]string {
	t.Helper()
	ports := map[string]string{}
	for _, a := range []string{gatewayAddr, tokenlimitAddr, upstreamAddr, caddyAdminAddr} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if a == caddyAdminAddr {
			addr = "localhost:" + strings.TrimPrefix(addr, "127.0.0.1:")
		}
		ports[a] = addr
	}
	return ports
}

// example is the file with its addresses replaced by ports (each must
// occur), and edit's first string by its second when edit is not nil, in a
// temporary directory.
func example(t *testing.T, name string, ports map[string]string, edit *[2]string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if edit != nil {
		if !strings.Contains(s, edit[0]) {
			t.Fatalf("%s does not hold the lines its comment says to replace:\n%s", name, edit[0])
		}
		s = strings.Replace(s, edit[0], edit[1], 1)
	}
	for from, to := range ports {
		if from == caddyAdminAddr && name != "Caddyfile" {
			continue
		}
		if !strings.Contains(s, from) {
			t.Fatalf("%s does not use %s", name, from)
		}
		s = strings.ReplaceAll(s, from, to)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startTokenlimit runs `tokenlimit serve` on addr until the test ends, and
// waits until it is ready.
func startTokenlimit(t *testing.T, addr string) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(cfg, []byte(testConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cli.Run(ctx, []string{"serve", "--config", cfg, "--listen", addr, "--grpc-listen", "",
			"--admin-token", adminToken, "--reload-every", "0"}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("tokenlimit serve: %v", err)
		}
	})
	waitListening(t, addr)
}

// startUpstream serves addr until the test ends: every request gets 200 and
// "upstream: METHOD URI".
func startUpstream(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream: %s %s\n", r.Method, r.RequestURI)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
}

// startNginx runs nginx on conf in the foreground until the test ends.
func startNginx(t *testing.T, bin, conf string) {
	t.Helper()
	dir := filepath.Dir(conf)
	startProcess(t, bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"),
		"-g", "daemon off; pid "+filepath.Join(dir, "nginx.pid")+";")
}

// startCaddy runs caddy on conf until the test ends.
func startCaddy(t *testing.T, bin, conf string) {
	t.Helper()
	startProcess(t, bin, "run", "--config", conf, "--adapter", "caddyfile")
}

// startProcess starts bin in its own process group with HOME and the XDG
// directories in a temporary one, stopped (the whole group) when the test
// ends; its output goes to the test's log on failure.
func startProcess(t *testing.T, bin string, args ...string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(bin), out.String())
		}
	})
}

// loopbackOnly fails the test when the gateway listening on addr (a
// 127.0.0.1 address) also accepts connections on another address: a
// listener bound to 127.0.0.1 refuses 127.0.0.2, one on every interface
// (*:port) accepts it.
func loopbackOnly(t *testing.T, addr string) {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.2", port), 5*time.Second); err == nil {
		conn.Close()
		t.Errorf("the gateway listening on %s accepts connections on 127.0.0.2 too: it listens on every interface, not on 127.0.0.1 alone", addr)
	}
}

// The Caddyfile is as `caddy fmt` writes it.
func TestCaddyfileIsFormatted(t *testing.T) {
	caddy := binary(t, "caddy", "/usr/bin/caddy")
	formatted, err := exec.Command(caddy, "fmt", "Caddyfile").Output()
	if err != nil {
		t.Fatalf("caddy fmt Caddyfile: %v", err)
	}
	file, err := os.ReadFile("Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(formatted, file) {
		t.Errorf("Caddyfile is not as caddy fmt writes it: run caddy fmt --overwrite examples/gateways/Caddyfile")
	}
}

// waitListening waits until something accepts connections on addr.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s after 60s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not timing a result
	}
}

// clientIP is the address the test's client connects from: not the
// gateway's 127.0.0.1, so that a wrong attribution shows.
const clientIP = "127.0.0.2"

var client = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP(clientIP)},
	}).DialContext},
}

type answer struct {
	status int
	header http.Header
	body   string
}

// get sends GET path to the gateway with headers ("Name: value").
func (f fixture) get(t *testing.T, path string, headers ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.gateway+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		req.Header.Add(name, value)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(body)}
}

// wantRemaining asks tokenlimit what the limit's budget for descriptors
// (JSON) has left.
func (f fixture) wantRemaining(t *testing.T, limit, descriptors string, want int64) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.tokenlimit+"/v1/admin/inspect", strings.NewReader(`{"descriptors": `+descriptors+`}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b struct {
		Limits []struct {
			Name      string `json:"name"`
			Remaining int64  `json:"remaining"`
		} `json:"limits"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatal(err)
	}
	for _, l := range b.Limits {
		if l.Name == limit {
			if l.Remaining != want {
				t.Errorf("%s for %s: %d left, want %d", limit, descriptors, l.Remaining, want)
			}
			return
		}
	}
	t.Errorf("%s for %s: not among %+v", limit, descriptors, b.Limits)
}

func (r answer) wantStatus(t *testing.T, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d; headers %v; body %q", r.status, want, r.header, r.body)
	}
}

func (r answer) wantHeader(t *testing.T, name, want string) {
	t.Helper()
	if got := r.header.Values(name); strings.Join(got, ", ") != want || (want == "" && len(got) > 0) {
		t.Errorf("%s: %q, want %q", name, got, want)
	}
}

func (r answer) wantPrefix(t *testing.T, name, prefix string) {
	t.Helper()
	if got := r.header.Values(name); len(got) != 1 || !strings.HasPrefix(got[0], prefix) {
		t.Errorf("%s: %q, want one value starting %q", name, got, prefix)
	}
}
