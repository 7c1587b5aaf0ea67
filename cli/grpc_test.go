package cli

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// grpcurlModule is the grpcurl build the tests use; scripts/test.sh
// installs it.
const grpcurlModule = "github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3"

// startServe runs tokenlimit serve with args until the test ends and
// returns its HTTP and gRPC addresses.
func startServe(t *testing.T, args ...string) (httpAddr, grpcAddr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := newSyncBuffer()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"}, args...), logs.w, io.Discard)
		logs.w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("serve returned %v after shutdown", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("serve did not shut down")
		}
	})
	httpAddr = logs.addr(t, "serving HTTP")
	grpcAddr = logs.addr(t, "serving gRPC (Envoy rate limit service v3)")
	go func() { // keep the pipe drained
		for range logs.lines {
		}
	}()
	return httpAddr, grpcAddr
}

// TestGrpcurlReflection: grpcurl lists the services by reflection, calls
// ShouldRateLimit (getting its request id back) and the health check, in
// both modes.
func TestGrpcurlReflection(t *testing.T) {
	t.Parallel()
	grpcurl := testkit.GoTool(t, "grpcurl", grpcurlModule)
	dir := t.TempDir()
	writeEnvoyDir(t, dir, 1)
	for _, mode := range []struct {
		name, domain, entries string
		args                  []string
	}{
		{"native", "llm", `[{"key":"user","value":"alice"},{"key":"route","value":"/v1/chat"}]`, nil},
		{"envoy", "api", `[{"key":"user","value":"alice"}]`, []string{"--envoy-config", dir}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			_, addr := startServe(t, mode.args...)
			run := func(args ...string) string {
				t.Helper()
				out, err := exec.Command(grpcurl, append([]string{"-plaintext"}, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("grpcurl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return string(out)
			}
			list := run(addr, "list")
			for _, svc := range []string{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
				if !strings.Contains(list, svc) {
					t.Errorf("grpcurl list:\n%s\nwant %s", list, svc)
				}
			}
			if desc := run(addr, "describe", "envoy.service.ratelimit.v3.RateLimitService"); !strings.Contains(desc, "rpc ShouldRateLimit") {
				t.Errorf("grpcurl describe:\n%s", desc)
			}
			req := `{"domain":"` + mode.domain + `","descriptors":[{"entries":` + mode.entries + `}]}`
			out := run("-v", "-H", "x-request-id: grpcurl-1", "-d", req, addr, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
			if !strings.Contains(out, `"overallCode": "OK"`) || !strings.Contains(out, `"currentLimit"`) {
				t.Errorf("grpcurl ShouldRateLimit:\n%s", out)
			}
			// The call's request id, the caller's, comes back as a header.
			if !strings.Contains(out, "x-request-id: grpcurl-1") {
				t.Errorf("grpcurl ShouldRateLimit: no x-request-id: grpcurl-1 among the response headers:\n%s", out)
			}
			if out := run(addr, "grpc.health.v1.Health/Check"); !strings.Contains(out, `"status": "SERVING"`) {
				t.Errorf("grpcurl health check:\n%s", out)
			}
		})
	}
}

// TestHealthFollowsTheStore: in the compatibility mode the health service
// says NOT_SERVING while Redis is down and SERVING again once it is back.
func TestHealthFollowsTheStore(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	dir := t.TempDir()
	writeEnvoyDir(t, dir, 1)
	_, addr := startServe(t, "--envoy-config", dir, "--redis", redis.URL())
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		h, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return h.Status
	}
	// A loaded machine may take longer than a health check allows for the
	// first call on a fresh connection: wait for SERVING.
	testkit.Eventually(t, 20*time.Second, "SERVING with Redis up", func() bool { return status() == healthpb.HealthCheckResponse_SERVING })
	if _, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "nope"}); err == nil {
		t.Error("an unknown service: no error")
	}
	redis.Stop()
	testkit.Eventually(t, 20*time.Second, "NOT_SERVING with Redis down", func() bool { return status() == healthpb.HealthCheckResponse_NOT_SERVING })
	redis.Restart()
	testkit.Eventually(t, 20*time.Second, "SERVING with Redis back", func() bool { return status() == healthpb.HealthCheckResponse_SERVING })
}
