package cli

import (
	"context"
	"net"
	"testing"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tokenlimit/tokenlimit/envoycompat"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/server/rlsv3"
)

// BenchmarkServeEnvoyGRPC measures one ShouldRateLimit of the
// compatibility mode over loopback gRPC, as serve runs it (its gRPC server
// and interceptors), on the embedded store: one descriptor within a large
// limit.
func BenchmarkServeEnvoyGRPC(b *testing.B) {
	cfg, err := envoycompat.Parse([]envoycompat.File{{Name: "b.yaml", Data: []byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 4000000000}\n")}}, envoycompat.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	engine, err := envoycompat.New(testkit.MemStore(b), cfg, envoycompat.Options{})
	if err != nil {
		b.Fatal(err)
	}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	_, fail := context.WithCancelCause(context.Background())
	srv, err := listenGRPC(addr, testkit.Quiet(), fail, func(context.Context) bool { return true }, func(s *grpc.Server) error {
		return rlsv3.RegisterEnvoyCompat(s, engine, rlsv3.Options{Logger: testkit.Quiet()})
	})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*commonpb.RateLimitDescriptor{
		{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
	}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := rls.ShouldRateLimit(ctx, req)
		if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
			b.Fatal(resp, err)
		}
	}
}
