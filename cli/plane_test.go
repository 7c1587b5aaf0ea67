package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/service"
)

// childArgs, in the environment, makes the test binary run the command
// line it holds (separated by US, 0x1f) instead of the tests: a real process to
// kill.
const childArgs = "TOKENLIMIT_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childArgs); args != "" {
		// As cmd/tokenlimit does: SIGTERM shuts down gracefully.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := Run(ctx, strings.Split(args, "\x1f"), os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child runs a command line of this binary as a process of its own and
// returns its HTTP address, once it logs it.
func child(t *testing.T, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd, addr, _ := startChild(t, nil, "serving HTTP", args...)
	return cmd, addr
}

// startChild runs a command line of this binary as a process of its own,
// with env added to the environment, and returns it, its HTTP address once
// it logs the line ready, and every line it writes to stdout (its logs).
func startChild(t *testing.T, env []string, ready string, args ...string) (*exec.Cmd, string, *testkit.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), env...), childArgs+"="+strings.Join(args, "\x1f"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	logs := &testkit.Buffer{}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintln(logs, sc.Text())
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == ready {
				select {
				case addr <- rec.Addr:
				default: // logged again: the first is the address
				}
			}
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("the process stopped before logging %q", ready)
		}
		return cmd, "http://" + a, logs
	case <-time.After(2 * time.Minute): // a proxy under -race beside CPU burners took over 30 s to start
		t.Fatalf("the process did not log %q within 2 minutes", ready)
	}
	return nil, "", nil
}

func call(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer secret")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	var v map[string]any
	json.Unmarshal(data, &v)
	return res.StatusCode, v
}

// TestPlaneSurvivesKill9: every admin write answered 2xx is there after
// the process is killed with SIGKILL right after the answer, on serve and
// on proxy, each with --data-dir; and the directory holds no secret.
func TestPlaneSurvivesKill9(t *testing.T) {
	t.Parallel()
	upstream := httptest.NewServer(&credentialLog{})
	t.Cleanup(upstream.Close) // after the parallel subtests
	cfg := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n  - {name: tokens, key: [api_key], algorithm: token_bucket, capacity: 1000000, refill: 1000000/min, cost: request}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, ready string
		args        []string
		// inForce calls base with secret and returns the status.
		inForce func(t *testing.T, base, secret string) int
	}{
		{"serve", "serving HTTP", []string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", ""}, checkKey},
		{"proxy", "proxying", []string{"proxy", "--config", cfg, "--upstream", upstream.URL, "--listen", "127.0.0.1:0"}, chatWith},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := append(c.args, "--admin-token", "secret", "--data-dir", dir)
			cmd, base, _ := startChild(t, nil, c.ready, args...)
			if code, body := call(t, http.MethodPost, base+"/v1/admin/teams", `{"name": "acme"}`); code != http.StatusCreated {
				t.Fatalf("POST teams: %d %v", code, body)
			}
			secrets := map[string]string{}
			for i := range 20 {
				code, body := call(t, http.MethodPost, base+"/v1/admin/keys", fmt.Sprintf(`{"name": "k%d", "team": "acme"}`, i))
				if code != http.StatusCreated {
					t.Fatalf("POST keys: %d %v", code, body)
				}
				secrets[body["id"].(string)] = body["secret"].(string)
			}
			var revoked string
			for id := range secrets {
				revoked = id
				break
			}
			if code, _ := call(t, http.MethodDelete, base+"/v1/admin/keys/"+revoked, ""); code != http.StatusNoContent {
				t.Fatalf("DELETE: %d", code)
			}
			cmd.Process.Kill() // SIGKILL, right after the last 2xx
			cmd.Wait()

			_, base, _ = startChild(t, nil, c.ready, args...)
			for id, secret := range secrets {
				if want := map[bool]int{true: http.StatusUnauthorized, false: http.StatusOK}[id == revoked]; c.inForce(t, base, secret) != want {
					t.Errorf("key %s after kill -9: %d, want %d", id, c.inForce(t, base, secret), want)
				}
			}
			data, err := os.ReadFile(filepath.Join(dir, plane.FileName))
			if err != nil {
				t.Fatal(err)
			}
			for _, secret := range secrets {
				if strings.Contains(string(data), secret) || strings.Contains(string(data), secret[3:]) {
					t.Fatal("the data dir holds a secret")
				}
			}
		})
	}
}

// TestProxyServesThePlane: the proxy's handler serves the plane's admin
// routes as serve does, answers 404 for other admin paths, and passes
// everything else to the proxy.
func TestProxyServesThePlane(t *testing.T) {
	t.Parallel()
	var svc *service.Service
	pl, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{Logger: testkit.Quiet(), KnownPlan: func(n string) bool { return svc.KnownPlan(n) }})
	if err != nil {
		t.Fatal(err)
	}
	svc = testkit.NewService(t, testkit.Setup{Store: testkit.Memory, Config: testkit.ParseConfig(t, "limits:\n  - {name: rpm, key: [api_key], algorithm: fixed_window, limit: 10/min}\n"),
		Start: time.Now(), Edit: func(o *service.Options) { o.Plane = pl }}).Service
	var proxied []string
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { proxied = append(proxied, r.URL.Path) })
	admin := httpx.PlaneAdmin{Plane: pl, Service: svc, Gate: httpx.NewAdminGate(map[string]string{"admin": "secret"}, false, nil), Log: testkit.Quiet(), MaxBody: 1 << 16}
	srv := httptest.NewServer(withAdmin(upstream, admin))
	defer srv.Close()
	base := srv.URL
	if code, body := call(t, http.MethodPost, base+"/v1/admin/teams", `{"name": "acme"}`); code != http.StatusCreated || body["id"] != "acme" {
		t.Fatalf("POST teams through the proxy: %d %v", code, body)
	}
	code, body := call(t, http.MethodPost, base+"/v1/admin/keys", `{"name": "k", "team": "acme"}`)
	if code != http.StatusCreated || body["secret"] == nil {
		t.Fatalf("POST keys through the proxy: %d %v", code, body)
	}
	if code, body := call(t, http.MethodGet, base+"/v1/admin/keys/"+body["id"].(string)+"/usage", ""); code != http.StatusOK {
		t.Fatalf("usage through the proxy: %d %v", code, body)
	}
	if code, _ := call(t, http.MethodGet, base+"/v1/admin/nothing", ""); code != http.StatusNotFound {
		t.Fatalf("an unknown admin path: %d, want 404", code)
	}
	call(t, http.MethodPost, base+"/v1/chat/completions", `{}`)
	if len(proxied) != 1 || proxied[0] != "/v1/chat/completions" {
		t.Fatalf("the proxy got %v, want only /v1/chat/completions", proxied)
	}
}

// TestPlaneOnRedisFromEnv: with the Redis URL in $TOKENLIMIT_REDIS_URL
// rather than --redis, the plane lives in Redis too: a key created
// through one replica is in force on another.
func TestPlaneOnRedisFromEnv(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	env := []string{"TOKENLIMIT_REDIS_URL=" + srv.URL()}
	args := []string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-token", "secret"}
	_, a, _ := startChild(t, env, "serving HTTP", args...)
	_, b, _ := startChild(t, env, "serving HTTP", args...)
	code, body := call(t, http.MethodPost, a+"/v1/admin/keys", `{"name": "k"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST keys: %d %v", code, body)
	}
	check := `{"descriptors": {"api_key": "` + body["secret"].(string) + `"}}`
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := call(t, http.MethodPost, b+"/v1/check", check)
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other replica still answers %d for the new key after 10 s: its plane is not Redis'", code)
		}
		time.Sleep(20 * time.Millisecond) // polling the replica, until the deadline
	}
}
