package grpclimit_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/grpclimit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// start serves gRPC's health service behind the interceptor on a real TCP
// port and returns a client of it.
func start(t *testing.T, limit tokenlimit.Limit, opts grpclimit.Options) healthpb.HealthClient {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	l, err := tokenlimit.NewLimiter(st, tokenlimit.WithClock(stopped))
	if err != nil {
		t.Fatal(err)
	}
	in, err := grpclimit.New(l, limit, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(in.Unary()), grpc.StreamInterceptor(in.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func withKey(key string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
}

func TestUnary(t *testing.T) {
	t.Parallel()
	c := start(t, tokenlimit.FixedWindowLimit(2, time.Minute), grpclimit.Options{Name: "calls", Key: grpclimit.KeyFromMetadata("X-Api-Key")})
	for i, want := range []string{"1", "0"} {
		var header metadata.MD
		if _, err := c.Check(withKey("k1"), &healthpb.HealthCheckRequest{}, grpc.Header(&header)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := header.Get("x-ratelimit-remaining"); len(got) != 1 || got[0] != want {
			t.Errorf("call %d: x-ratelimit-remaining %v, want %s", i, got, want)
		}
		if got := header.Get("ratelimit-policy"); len(got) != 1 || got[0] != `"calls";q=2;w=60` {
			t.Errorf("call %d: ratelimit-policy %v", i, got)
		}
	}
	var header metadata.MD
	_, err := c.Check(withKey("k1"), &healthpb.HealthCheckRequest{}, grpc.Header(&header))
	if status.Code(err) != codes.ResourceExhausted || len(header.Get("retry-after")) != 1 || header.Get("retry-after")[0] != "60" {
		t.Errorf("third call: %v, metadata %v; want RESOURCE_EXHAUSTED with retry-after 60", err, header)
	}
	if _, err := c.Check(withKey("k2"), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("another key: %v", err)
	}
	_, err = c.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "x-api-key: missing") {
		t.Errorf("no key: %v, want INVALID_ARGUMENT naming x-api-key", err)
	}
}

func TestStreamAndDefaultKey(t *testing.T) {
	t.Parallel()
	c := start(t, tokenlimit.FixedWindowLimit(1, time.Minute), grpclimit.Options{
		Key: grpclimit.KeyFromMetadata("x-api-key"), DefaultKey: "anonymous",
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	if h, err := w.Header(); err != nil || len(h.Get("x-ratelimit-remaining")) != 1 || h.Get("x-ratelimit-remaining")[0] != "0" {
		t.Errorf("first stream's header: %v, %v", h, err)
	}
	w2, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second anonymous stream: %v, want RESOURCE_EXHAUSTED", err)
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	t.Parallel()
	if in, err := grpclimit.New(nil, tokenlimit.FixedWindowLimit(1, time.Second), grpclimit.Options{}); in != nil || err == nil || !strings.HasPrefix(err.Error(), "grpclimit: ") {
		t.Errorf("nil limiter: %v, %v", in, err)
	}
}
