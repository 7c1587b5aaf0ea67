package rlsv3

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/service"
)

// currentLimit describes every window exactly when it is a whole number of
// seconds: the longest unit that divides it, times a multiplier.
func TestCurrentLimitUnits(t *testing.T) {
	t.Parallel()
	const (
		second = rlspb.RateLimitResponse_RateLimit_SECOND
		minute = rlspb.RateLimitResponse_RateLimit_MINUTE
		hour   = rlspb.RateLimitResponse_RateLimit_HOUR
		day    = rlspb.RateLimitResponse_RateLimit_DAY
		month  = rlspb.RateLimitResponse_RateLimit_MONTH
	)
	cases := []struct {
		policy  service.Policy
		perUnit uint32
		unit    rlspb.RateLimitResponse_RateLimit_Unit
		mult    uint32 // 0: unit_multiplier left unset (1)
	}{
		{service.Policy{Limit: 5, Window: 5 * time.Second}, 5, second, 5},
		{service.Policy{Limit: 10, Window: time.Second}, 10, second, 0},
		{service.Policy{Limit: 10, Window: time.Minute}, 10, minute, 0},
		{service.Policy{Limit: 10, Window: 90 * time.Second}, 10, second, 90},
		{service.Policy{Limit: 10, Window: 2 * time.Hour}, 10, hour, 2},
		{service.Policy{Limit: 10, Window: 90 * time.Minute}, 10, minute, 90},
		{service.Policy{Limit: 10, Window: 24 * time.Hour}, 10, day, 0},
		{service.Policy{Limit: 10, Window: 7 * 24 * time.Hour}, 10, day, 7},
		{service.Policy{Limit: 10, Window: 366 * 24 * time.Hour}, 10, day, 366},
		// Not whole seconds: the nearest second, at least 1.
		{service.Policy{Limit: 10, Window: 1500 * time.Millisecond}, 10, second, 2},
		{service.Policy{Limit: 10, Window: 100 * time.Millisecond}, 10, second, 0},
		// Calendar quotas: one day or one month, whatever its length.
		{service.Policy{Limit: 100, Window: 23 * time.Hour, Calendar: config.Day}, 100, day, 0},
		{service.Policy{Limit: 100, Window: 29 * 24 * time.Hour, Calendar: config.Month}, 100, month, 0},
		// Limits beyond uint32 are clamped.
		{service.Policy{Limit: tokenlimit.MaxQuota, Window: time.Second}, math.MaxUint32, second, 0},
	}
	for _, c := range cases {
		got := currentLimit("l", c.policy)
		if got.GetName() != "l" || got.GetRequestsPerUnit() != c.perUnit || got.GetUnit() != c.unit || got.GetUnitMultiplier().GetValue() != c.mult {
			t.Errorf("%+v: got %d per %s x %d, want %d per %s x %d", c.policy,
				got.GetRequestsPerUnit(), got.GetUnit(), got.GetUnitMultiplier().GetValue(), c.perUnit, c.unit, c.mult)
		}
	}
}

// BenchmarkHandler is ShouldRateLimit without gRPC: mapping the request,
// the service's decision on the embedded store and building the response.
// Compared with BenchmarkShouldRateLimit/serial it shows what gRPC costs.
func BenchmarkHandler(b *testing.B) {
	cfg, err := config.Load("../../examples/quickstart.yaml")
	if err != nil {
		b.Fatal(err)
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := service.New(cfg, service.Options{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	s := &server{svc: svc, log: slog.New(slog.DiscardHandler)}
	const users = 10_000
	reqs := make([]*rlspb.RateLimitRequest, users)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "llm", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{
			{Key: "user", Value: fmt.Sprintf("user-%d", i)}, {Key: "route", Value: "/v1/chat"},
		}}}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.ShouldRateLimit(ctx, reqs[i%users]); err != nil {
			b.Fatal(err)
		}
	}
}
