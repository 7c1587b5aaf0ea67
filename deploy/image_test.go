package deploy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
)

// imageVersion is the version the tests stamp into the image they build.
const imageVersion = "v0.0.0-imagetest"

// image is the image scripts/image.sh builds, built once per test binary.
const image = "localhost/tokenlimit:latest"

// maxImageBytes is the image's budget, uncompressed.
const maxImageBytes = 50_000_000

var (
	buildOnce sync.Once
	buildErr  error
)

// buildImage runs scripts/image.sh once for all the tests, or skips them
// when podman is missing (fails them under CI=true).
func buildImage(t *testing.T) {
	t.Helper()
	podman(t)
	buildOnce.Do(func() {
		cmd := exec.Command("../scripts/image.sh")
		cmd.Env = append(os.Environ(), "VERSION="+imageVersion)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("scripts/image.sh: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// containersConf is a containers.conf that lets podman run containers
// here: no default ulimits (setting them fails on this machine class).
var containersConf = sync.OnceValue(func() string {
	f, err := os.CreateTemp("", "tokenlimit-containers-*.conf")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.WriteString("[containers]\ndefault_ulimits = []\n"); err != nil {
		panic(err)
	}
	return f.Name()
})

// run runs podman with args and returns its stdout; stderr goes into the
// error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(podman(t), args...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+containersConf())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The image is what the issue asks: non-root, `tokenlimit serve` as entry
// point, ports and a health check declared, the version stamped, under
// 50 MB, and nothing in it but the binary, CA certificates and the user.
func TestImageShape(t *testing.T) {
	buildImage(t)
	var inspect []struct {
		Size        int64
		Healthcheck struct{ Test []string } // podman has it here, beside the config
		Config      struct {
			User         string
			Entrypoint   []string
			ExposedPorts map[string]struct{}
			Labels       map[string]string
		}
	}
	if err := json.Unmarshal([]byte(mustRun(t, "image", "inspect", image)), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect: %v", err)
	}
	img := inspect[0]
	t.Logf("image size: %d bytes (%.1f MB)", img.Size, float64(img.Size)/1e6)
	if img.Size > maxImageBytes {
		t.Errorf("image is %d bytes, over the budget of %d", img.Size, maxImageBytes)
	}
	c := img.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (not root)", c.User)
	}
	if len(c.Entrypoint) < 2 || c.Entrypoint[0] != "/tokenlimit" || c.Entrypoint[1] != "serve" {
		t.Errorf("entrypoint %v, want /tokenlimit serve ...", c.Entrypoint)
	}
	for _, port := range []string{"8080/tcp", "8081/tcp"} {
		if _, ok := c.ExposedPorts[port]; !ok {
			t.Errorf("port %s not declared: %v", port, c.ExposedPorts)
		}
	}
	if got := strings.Join(img.Healthcheck.Test, " "); !strings.Contains(got, "/tokenlimit health") || !strings.Contains(got, "/readyz") {
		t.Errorf("health check %q, want /tokenlimit health on /readyz", got)
	}
	if c.Labels["org.opencontainers.image.version"] != imageVersion {
		t.Errorf("version label %q, want %s", c.Labels["org.opencontainers.image.version"], imageVersion)
	}
	if _, err := run(t, "image", "exists", "localhost/tokenlimit:"+imageVersion); err != nil {
		t.Errorf("the image is not tagged with its version: %v", err)
	}

	// The version stamped in the binary, and a static binary built by the
	// Go that builds the tests.
	out := mustRun(t, "run", "--rm", "--runtime", "runc", "--network", "host", "--entrypoint", "/tokenlimit", image, "version")
	for _, want := range []string{"tokenlimit " + imageVersion + "\n", "go         " + runtime.Version() + " linux/"} {
		if !strings.Contains(out, want) {
			t.Errorf("tokenlimit version in the image lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^commit     [0-9a-f]{40}$`).MatchString(out) {
		t.Errorf("tokenlimit version in the image has no commit:\n%s", out)
	}

	// Nothing else: no shell, no package manager.
	if out, err := run(t, "run", "--rm", "--runtime", "runc", "--network", "host", "--entrypoint", "/bin/sh", image, "-c", "true"); err == nil {
		t.Errorf("the image runs /bin/sh:\n%s", out)
	}
	files := imageFiles(t)
	want := map[string]bool{"tokenlimit": true, "etc/passwd": true, "etc/group": true, "etc/ssl/certs/ca-certificates.crt": true}
	for _, f := range files {
		if !want[f] && !podmanAdds(f) {
			t.Errorf("the image holds %s, beyond the binary, the CA certificates and the user", f)
		}
		delete(want, f)
	}
	for f := range want {
		t.Errorf("the image lacks %s", f)
	}
}

// podmanAdds says whether podman itself puts name into every container's
// file system (mount points and the files it writes at run time).
func podmanAdds(name string) bool {
	switch name {
	case "etc/hosts", "etc/hostname", "etc/resolv.conf", "run/.containerenv", ".containerenv":
		return true
	}
	return false
}

// imageFiles lists the regular files of a container of the image.
func imageFiles(t *testing.T) []string {
	t.Helper()
	id := strings.TrimSpace(mustRun(t, "create", "--runtime", "runc", image))
	defer run(t, "rm", "-f", id) //nolint:errcheck // best effort
	tarPath := filepath.Join(t.TempDir(), "fs.tar")
	mustRun(t, "export", "-o", tarPath, id)
	out, err := exec.Command("tar", "-tvf", tarPath).Output()
	if err != nil {
		t.Fatalf("tar -tvf: %v", err)
	}
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 0 && !strings.HasPrefix(fields[0], "d") {
			files = append(files, strings.TrimPrefix(fields[len(fields)-1], "./"))
		}
	}
	return files
}

// container is one running container of the image, serving HTTP on base.
type container struct {
	name string
	base string // http://127.0.0.1:port
}

// limitsYAML is a configuration whose budget two containers share: 10
// requests an hour per user.
const limitsYAML = `limits:
  - name: per-user
    key: [user]
    algorithm: sliding_log
    limit: 10/1h
`

// startContainer runs the image with the configuration and extra args,
// and waits until /readyz answers 200. It is removed when the test ends.
func startContainer(t *testing.T, configYAML string, args ...string) container {
	t.Helper()
	buildImage(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(configYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	c := container{name: "tokenlimit-test-" + randomHex(t), base: "http://127.0.0.1:" + port}
	// The image's health check asks port 8080; this container listens on
	// a free port, so its health check asks that one.
	health := `["/tokenlimit", "health", "--url", "` + c.base + `/readyz"]`
	mustRun(t, append([]string{"run", "-d", "--runtime", "runc", "--network", "host", "--name", c.name,
		"--health-cmd", health, "-v", cfg + ":/etc/tokenlimit/config.yaml:ro", image,
		"--listen=127.0.0.1:" + port, "--grpc-listen=", "--config=/etc/tokenlimit/config.yaml", "--reload-every=0"}, args...)...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := run(t, "logs", c.name)
			t.Logf("%s logs:\n%s", c.name, logs)
		}
		run(t, "rm", "-f", "-t", "0", c.name) //nolint:errcheck // best effort
	})
	waitFor(t, "/readyz of "+c.name, func() bool {
		status, _ := get(c.base + "/readyz")
		return status == http.StatusOK
	})
	return c
}

// The image starts, answers /readyz and its health check, and two
// containers of it on one redis-server decide as one.
func TestImageTwoReplicasDecideAsOne(t *testing.T) {
	buildImage(t)
	redis := redistest.Start(t)
	a := startContainer(t, limitsYAML, "--redis="+redis.URL())
	b := startContainer(t, limitsYAML, "--redis="+redis.URL())
	if out, err := run(t, "healthcheck", "run", a.name); err != nil {
		t.Errorf("podman healthcheck run %s: %v %s", a.name, err, out)
	}
	allowed := 0
	for i := range 30 {
		c := []container{a, b}[i%2]
		status, err := post(c.base+"/v1/check", `{"descriptors":{"user":"ann"}}`)
		if err != nil {
			t.Fatal(err)
		}
		switch status {
		case http.StatusOK:
			allowed++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("check %d on %s: HTTP %d", i, c.name, status)
		}
	}
	if allowed != 10 {
		t.Errorf("two containers on one Redis allowed %d of 30 checks, want the one budget's 10", allowed)
	}
}

// On SIGTERM the container stops taking connections, finishes the request
// in flight (its answer arrives after the signal) and exits 0.
func TestImageDrainsOnSIGTERM(t *testing.T) {
	c := startContainer(t, limitsYAML)
	status, data := inFlightAtSIGTERM(t, c, "/v1/check", `{"descriptors":{"user":"ann"}}`)
	if status != http.StatusOK || !strings.Contains(data, `"allowed":true`) {
		t.Errorf("the check in flight at SIGTERM: HTTP %d %s, want its decision", status, data)
	}
}

// bucketYAML is a token bucket of 10 that refills 1 an hour.
const bucketYAML = `limits:
  - name: per-user
    key: [user]
    algorithm: token_bucket
    capacity: 10
    refill: 1/1h
`

// A settlement in flight at SIGTERM is applied before the container exits:
// a reservation of 8 settled at 1 leaves 9 of the bucket's 10 for a second
// container on the same Redis.
func TestImageSettlesInFlightOnSIGTERM(t *testing.T) {
	redis := redistest.Start(t)
	a := startContainer(t, bucketYAML, "--redis="+redis.URL())
	b := startContainer(t, bucketYAML, "--redis="+redis.URL())
	if status, err := post(a.base+"/v1/reserve", `{"id":"r1","descriptors":{"user":"bob"},"cost":8}`); err != nil || status != http.StatusOK {
		t.Fatalf("reserve on %s: HTTP %d, %v", a.name, status, err)
	}
	status, data := inFlightAtSIGTERM(t, a, "/v1/settle", `{"id":"r1","actual":1}`)
	if status != http.StatusOK || !strings.Contains(data, `"settled":true`) {
		t.Fatalf("the settlement in flight at SIGTERM: HTTP %d %s, want it settled", status, data)
	}
	allowed := 0
	for range 12 {
		status, err := post(b.base+"/v1/check", `{"descriptors":{"user":"bob"}}`)
		if err != nil {
			t.Fatal(err)
		}
		if status == http.StatusOK {
			allowed++
		}
	}
	if allowed != 9 {
		t.Errorf("after a reservation of 8 settled at 1, %d checks of 1 allowed on the other container, want 9", allowed)
	}
}

// inFlightAtSIGTERM sends a POST of body to path on c, SIGTERMs c while
// the request is in flight, checks that c takes no new connection and
// exits 0, and returns the request's answer.
func inFlightAtSIGTERM(t *testing.T, c container, path, body string) (int, string) {
	t.Helper()
	addr := strings.TrimPrefix(c.base, "http://")
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Expect: 100-continue: the server answers 100 once the handler reads
	// the body, so the request is in flight when the signal comes.
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", path, addr, len(body))
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("before the body: %q, %v, want 100 Continue", line, err)
	}
	_, _ = r.ReadString('\n') // the blank line after 100 Continue
	mustRun(t, "kill", "--signal", "TERM", c.name)
	waitFor(t, c.name+" shutting down", func() bool {
		logs, _ := run(t, "logs", c.name)
		return strings.Contains(logs, "shutting down")
	})
	if status, err := get(c.base + "/healthz"); err == nil {
		t.Errorf("a new request after SIGTERM got HTTP %d, want the connection refused", status)
	}
	if _, err := io.WriteString(conn, body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("the request in flight at SIGTERM got no answer: %v", err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if code := strings.TrimSpace(mustRun(t, "wait", c.name)); code != "0" {
		t.Errorf("exit status after SIGTERM: %s, want 0", code)
	}
	return resp.StatusCode, string(data)
}

// A configuration that does not validate stops the container at start
// with a non-zero status and a message naming the file and the field.
func TestImageRefusesBadConfig(t *testing.T) {
	buildImage(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n  - name: broken\n    key: [user]\n    algorithm: sliding_log\n    limit: 0/1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(podman(t), "run", "--rm", "--runtime", "runc", "--network", "host",
		"-v", cfg+":/etc/tokenlimit/config.yaml:ro", image, "--config=/etc/tokenlimit/config.yaml", "--listen=127.0.0.1:"+freePort(t), "--grpc-listen=")
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+containersConf())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() { <-ctx.Done(); _ = cmd.Process.Kill() }()
	err := cmd.Run()
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() == 0 {
		t.Fatalf("a container with a bad configuration: %v, want a non-zero exit", err)
	}
	for _, want := range []string{"tokenlimit: /etc/tokenlimit/config.yaml", "limits[0].limit"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("its message lacks %q:\n%s", want, stderr.String())
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

var client = &http.Client{Timeout: 10 * time.Second}

func get(url string) (int, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func post(url, body string) (int, error) {
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitFor polls cond until it holds, failing the test after two minutes
// (a container's start on a loaded machine).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 2 minutes for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
