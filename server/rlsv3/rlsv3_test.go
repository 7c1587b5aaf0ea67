package rlsv3_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/server/rlsv3"
	"github.com/tokenlimit/tokenlimit/service"
)

// base is the fixed time every test starts at.
var base = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// harness is a real gRPC server on a loopback port serving one service, and
// a generated client connected to it.
type harness struct {
	client rlspb.RateLimitServiceClient
	clock  *testkit.Clock
	redis  *redistest.Server // nil on the embedded store
}

// start serves cfg from the named store. Redis runs in caller-time mode
// behind a real redis-server, with the service treating it as remote
// (timeouts, breaker, failure modes).
func start(t *testing.T, store string, cfg *config.Config, tweak ...func(*service.Options)) *harness {
	t.Helper()
	te := testkit.NewService(t, testkit.Setup{
		Store: store, Config: cfg, Start: base, Client: testkit.Rueidis,
		Edit: func(o *service.Options) {
			for _, f := range tweak {
				f(o)
			}
		},
	})
	return &harness{client: serve(t, te.Service), clock: te.Clock, redis: te.Redis}
}

// serve registers svc on a new gRPC server listening on 127.0.0.1:0 and
// returns a client of it; both stop when the test ends.
func serve(tb testing.TB, svc *service.Service, opts ...grpc.ServerOption) rlspb.RateLimitServiceClient {
	tb.Helper()
	return serveWith(tb, svc, rlsv3.Options{}, opts...)
}

// serveWith is serve with the service's options o.
func serveWith(tb testing.TB, svc *service.Service, o rlsv3.Options, opts ...grpc.ServerOption) rlspb.RateLimitServiceClient {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodecV2(rlsv3.Codec())}, opts...)...)
	if err := rlsv3.Register(s, svc, o); err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		conn.Close()
		s.Stop()
		if err := <-done; err != nil {
			tb.Errorf("grpc Serve: %v", err)
		}
	})
	return rlspb.NewRateLimitServiceClient(conn)
}

func loadConfig(t testing.TB, path string) *config.Config {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func parseConfig(t testing.TB, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), t.Name()+".yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (h *harness) call(t *testing.T, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := h.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("at +%s: ShouldRateLimit(%v): %v", h.clock.Now().Sub(base), prototext.Format(req), err)
	}
	return resp
}

// desc is a descriptor of "key", "value" pairs.
func desc(kv ...string) *commonpb.RateLimitDescriptor {
	d := &commonpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// hits sets a descriptor's own hits_addend.
func hits(d *commonpb.RateLimitDescriptor, n uint64) *commonpb.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func request(domain string, descs ...*commonpb.RateLimitDescriptor) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: domain, Descriptors: descs}
}

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT

	second = rlspb.RateLimitResponse_RateLimit_SECOND
	minute = rlspb.RateLimitResponse_RateLimit_MINUTE
	hour   = rlspb.RateLimitResponse_RateLimit_HOUR
	day    = rlspb.RateLimitResponse_RateLimit_DAY
	month  = rlspb.RateLimitResponse_RateLimit_MONTH
)

// limited is the status of a descriptor that selected a limit: name,
// perUnit per unit x mult, with remaining left and reset until full.
func limited(code rlspb.RateLimitResponse_Code, name string, perUnit uint32, unit rlspb.RateLimitResponse_RateLimit_Unit, mult uint32, remaining uint32, reset time.Duration) *rlspb.RateLimitResponse_DescriptorStatus {
	rl := &rlspb.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: perUnit, Unit: unit}
	if mult != 1 {
		rl.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return &rlspb.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: rl, LimitRemaining: remaining, DurationUntilReset: durationpb.New(reset)}
}

// unlimited is the status of a descriptor that selected no limit.
func unlimited() *rlspb.RateLimitResponse_DescriptorStatus {
	return &rlspb.RateLimitResponse_DescriptorStatus{Code: ok}
}

// hdrs builds response headers from "name", "value" pairs.
func hdrs(kv ...string) []*corepb.HeaderValue {
	var out []*corepb.HeaderValue
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &corepb.HeaderValue{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// expect compares a whole response. The IETF RateLimit and RateLimit-Policy
// fields are checked against the x-ratelimit-* headers (same remaining,
// reset and capacity, one limit name), then left out of the comparison;
// TestQuickstart checks their values.
func expect(t *testing.T, step string, got *rlspb.RateLimitResponse, code rlspb.RateLimitResponse_Code, headers []*corepb.HeaderValue, statuses ...*rlspb.RateLimitResponse_DescriptorStatus) {
	t.Helper()
	got = proto.Clone(got).(*rlspb.RateLimitResponse)
	got.ResponseHeadersToAdd = withoutIETF(t, step, got.ResponseHeadersToAdd)
	want := &rlspb.RateLimitResponse{OverallCode: code, Statuses: statuses, ResponseHeadersToAdd: headers}
	if !proto.Equal(got, want) {
		t.Errorf("%s:\n got %s\nwant %s", step, prototext.Format(got), prototext.Format(want))
	}
}

// The quickstart configuration served over RLS: the token bucket simulator
// (capacity 10, 2/s, chat 1, embed 3) and the 5-per-5s hard cap, with every
// number of every status and header.
func TestQuickstart(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		h := start(t, store, loadConfig(t, "../../examples/quickstart.yaml"))
		// A chat, then three embeds empty alice's bucket of 10; it refills
		// one token per 0.5s, so 10 tokens take 5s: "10 per 5 seconds".
		steps := []struct {
			route     string
			remaining uint32
			reset     time.Duration
		}{
			{"/v1/chat", 9, 500 * time.Millisecond},
			{"/v1/embed", 6, 2 * time.Second},
			{"/v1/embed", 3, 3500 * time.Millisecond},
			{"/v1/embed", 0, 5 * time.Second},
		}
		for i, s := range steps {
			resp := h.call(t, request("llm", desc("user", "alice", "route", s.route)))
			if i == 0 {
				ietf := map[string]string{}
				for _, h := range resp.ResponseHeadersToAdd {
					ietf[h.Key] = h.Value
				}
				if ietf["ratelimit"] != `"llm-budget";r=9;t=1` || ietf["ratelimit-policy"] != `"llm-budget";q=10;w=5` {
					t.Errorf("first chat: RateLimit %q, RateLimit-Policy %q", ietf["ratelimit"], ietf["ratelimit-policy"])
				}
			}
			expect(t, fmt.Sprintf("step %d %s", i, s.route), resp, ok,
				hdrs("x-ratelimit-limit", "10", "x-ratelimit-remaining", fmt.Sprint(s.remaining), "x-ratelimit-reset", fmt.Sprint(ceil(s.reset))),
				limited(ok, "llm-budget", 10, second, 5, s.remaining, s.reset))
		}
		// A fourth embed needs 3 tokens: 1.5s away, so retry-after 2.
		resp := h.call(t, request("llm", desc("user", "alice", "route", "/v1/embed")))
		expect(t, "denied embed", resp, over,
			hdrs("x-ratelimit-limit", "10", "x-ratelimit-remaining", "0", "x-ratelimit-reset", "5", "retry-after", "2"),
			limited(over, "llm-budget", 10, second, 5, 0, 5*time.Second))
		// 1.5s later it fits.
		h.clock.Advance(1500 * time.Millisecond)
		resp = h.call(t, request("llm", desc("user", "alice", "route", "/v1/embed")))
		expect(t, "embed after 1.5s", resp, ok,
			hdrs("x-ratelimit-limit", "10", "x-ratelimit-remaining", "0", "x-ratelimit-reset", "5"),
			limited(ok, "llm-budget", 10, second, 5, 0, 5*time.Second))

		// Two descriptors at once: bob's sensitive call selects the hard cap
		// (5 per 5s) and his bucket; carol's embed only her bucket. Each
		// status reports its own tightest limit; the headers the tightest
		// of all (the hard cap, with 4 left).
		resp = h.call(t, request("llm", desc("user", "bob", "route", "/v1/sensitive"), desc("user", "carol", "route", "/v1/embed")))
		expect(t, "bob and carol", resp, ok,
			hdrs("x-ratelimit-limit", "5", "x-ratelimit-remaining", "4", "x-ratelimit-reset", "5"),
			limited(ok, "hard-cap", 5, second, 5, 4, 5*time.Second),
			limited(ok, "llm-budget", 10, second, 5, 7, 1500*time.Millisecond))
		// Four more sensitive calls, one per second, fill the hard cap; the
		// sixth waits until the first leaves the window at +5s.
		for i := range 4 {
			h.clock.Advance(time.Second)
			resp = h.call(t, request("llm", desc("user", "bob", "route", "/v1/sensitive")))
			if got := resp.Statuses[0]; got.Code != ok || got.LimitRemaining != uint32(3-i) || got.CurrentLimit.GetName() != "hard-cap" {
				t.Fatalf("sensitive call %d: %v", i+2, prototext.Format(resp))
			}
		}
		resp = h.call(t, request("llm", desc("user", "bob", "route", "/v1/sensitive")))
		expect(t, "sixth sensitive call", resp, over,
			hdrs("x-ratelimit-limit", "5", "x-ratelimit-remaining", "0", "x-ratelimit-reset", "5", "retry-after", "1"),
			limited(over, "hard-cap", 5, second, 5, 0, 5*time.Second))
	})
}

// withoutIETF checks that headers carry RateLimit and RateLimit-Policy
// fields agreeing with their x-ratelimit-* headers, and returns the others.
func withoutIETF(t *testing.T, step string, headers []*corepb.HeaderValue) []*corepb.HeaderValue {
	t.Helper()
	if len(headers) == 0 {
		return headers
	}
	values := map[string]string{}
	var rest []*corepb.HeaderValue
	for _, h := range headers {
		values[h.Key] = h.Value
		if h.Key != "ratelimit" && h.Key != "ratelimit-policy" {
			rest = append(rest, h)
		}
	}
	name, fields, _ := strings.Cut(values["ratelimit"], ";")
	pname, pfields, _ := strings.Cut(values["ratelimit-policy"], ";")
	q, w, _ := strings.Cut(strings.TrimPrefix(pfields, "q="), ";w=")
	if !strings.HasPrefix(name, `"`) || name != pname ||
		fields != "r="+values["x-ratelimit-remaining"]+";t="+values["x-ratelimit-reset"] ||
		q != values["x-ratelimit-limit"] || w == "" || w == "0" {
		t.Errorf("%s: ratelimit %q and ratelimit-policy %q disagree with %v", step, values["ratelimit"], values["ratelimit-policy"], values)
	}
	return rest
}

func ceil(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// hits_addend is the cost: the descriptor's over the request's, 0 counting
// as 1. The hard cap's cost is the request's own; the bucket's comes from
// route weights, so it stays at 1 whatever hits_addend says.
func TestHitsAddendIsCost(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		h := start(t, store, loadConfig(t, "../../examples/quickstart.yaml"))
		sensitive := func(user string) *commonpb.RateLimitDescriptor {
			return desc("user", user, "route", "/v1/sensitive")
		}
		// Request-level hits_addend 3.
		req := request("llm", sensitive("dave"))
		req.HitsAddend = 3
		resp := h.call(t, req)
		expect(t, "request hits_addend 3", resp, ok,
			hdrs("x-ratelimit-limit", "5", "x-ratelimit-remaining", "2", "x-ratelimit-reset", "5"),
			limited(ok, "hard-cap", 5, second, 5, 2, 5*time.Second))
		// The descriptor's hits_addend (1) overrides the request's (4).
		req = request("llm", hits(sensitive("dave"), 1))
		req.HitsAddend = 4
		resp = h.call(t, req)
		expect(t, "descriptor hits_addend 1 over request 4", resp, ok,
			hdrs("x-ratelimit-limit", "5", "x-ratelimit-remaining", "1", "x-ratelimit-reset", "5"),
			limited(ok, "hard-cap", 5, second, 5, 1, 5*time.Second))
		// 2 no longer fits; nothing is charged, the bucket included.
		resp = h.call(t, request("llm", hits(sensitive("dave"), 2)))
		expect(t, "descriptor hits_addend 2, 1 left", resp, over,
			hdrs("x-ratelimit-limit", "5", "x-ratelimit-remaining", "1", "x-ratelimit-reset", "5", "retry-after", "5"),
			limited(over, "hard-cap", 5, second, 5, 1, 5*time.Second))
		// hits_addend 0, at either level, counts 1.
		resp = h.call(t, request("llm", hits(sensitive("dave"), 0)))
		expect(t, "descriptor hits_addend 0", resp, ok,
			hdrs("x-ratelimit-limit", "5", "x-ratelimit-remaining", "0", "x-ratelimit-reset", "5"),
			limited(ok, "hard-cap", 5, second, 5, 0, 5*time.Second))
		// dave's bucket paid 1 per admitted call (3 calls) and 1 for this
		// chat: 6 left, 2s from full.
		resp = h.call(t, request("llm", desc("user", "dave", "route", "/v1/chat")))
		expect(t, "dave's bucket", resp, ok,
			hdrs("x-ratelimit-limit", "10", "x-ratelimit-remaining", "6", "x-ratelimit-reset", "2"),
			limited(ok, "llm-budget", 10, second, 5, 6, 2*time.Second))
		// A cost no budget can ever admit: OVER_LIMIT without retry-after.
		resp = h.call(t, request("llm", hits(sensitive("erin"), 6)))
		expect(t, "cost above capacity", resp, over,
			hdrs("x-ratelimit-limit", "5", "x-ratelimit-remaining", "5", "x-ratelimit-reset", "0"),
			limited(over, "hard-cap", 5, second, 5, 5, 0))
	})
}

// All descriptors are one atomic check: when one is denied, the others'
// limits are charged nothing, as the next request shows.
func TestAtomicAcrossDescriptors(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		h := start(t, store, loadConfig(t, "../../examples/quickstart.yaml"))
		// frank fills his hard cap in one call (and pays 1 from his bucket).
		h.call(t, request("llm", hits(desc("user", "frank", "route", "/v1/sensitive"), 5)))
		// erin's chat and frank's sixth sensitive call together: frank's
		// denial stops erin's charge too.
		resp := h.call(t, request("llm",
			desc("user", "erin", "route", "/v1/embed"),
			desc("user", "frank", "route", "/v1/sensitive")))
		expect(t, "erin with frank", resp, over,
			hdrs("x-ratelimit-limit", "5", "x-ratelimit-remaining", "0", "x-ratelimit-reset", "5", "retry-after", "5"),
			limited(ok, "llm-budget", 10, second, 5, 10, 0),
			limited(over, "hard-cap", 5, second, 5, 0, 5*time.Second))
		// erin's bucket is still full: this chat leaves 9, not 6.
		resp = h.call(t, request("llm", desc("user", "erin", "route", "/v1/chat")))
		expect(t, "erin after", resp, ok,
			hdrs("x-ratelimit-limit", "10", "x-ratelimit-remaining", "9", "x-ratelimit-reset", "1"),
			limited(ok, "llm-budget", 10, second, 5, 9, 500*time.Millisecond))
		// frank's bucket paid only for the first call: 9 - 1 = 8.
		resp = h.call(t, request("llm", desc("user", "frank", "route", "/v1/chat")))
		expect(t, "frank after", resp, ok,
			hdrs("x-ratelimit-limit", "10", "x-ratelimit-remaining", "8", "x-ratelimit-reset", "1"),
			limited(ok, "llm-budget", 10, second, 5, 8, time.Second))
	})
}

// Descriptors that overlap (Envoy sends {user} and {user, route} from two
// rate_limit actions) select the same budget twice: it is charged once with
// both costs, and both statuses report it.
func TestOverlappingDescriptors(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		h := start(t, store, loadConfig(t, "../../examples/quickstart.yaml"))
		resp := h.call(t, request("llm", desc("user", "gina"), desc("user", "gina", "route", "/v1/embed")))
		// 1 (no route: the default weight) + 3 (embed) = 4.
		expect(t, "overlapping", resp, ok,
			hdrs("x-ratelimit-limit", "10", "x-ratelimit-remaining", "6", "x-ratelimit-reset", "2"),
			limited(ok, "llm-budget", 10, second, 5, 6, 2*time.Second),
			limited(ok, "llm-budget", 10, second, 5, 6, 2*time.Second))
		// Two embeds: the route weights fix the bucket's cost at 3 each
		// (hits_addend does not change it), so 6 fits exactly.
		resp = h.call(t, request("llm", hits(desc("user", "gina", "route", "/v1/embed"), 9), desc("user", "gina", "route", "/v1/embed")))
		expect(t, "two embeds", resp, ok,
			hdrs("x-ratelimit-limit", "10", "x-ratelimit-remaining", "0", "x-ratelimit-reset", "5"),
			limited(ok, "llm-budget", 10, second, 5, 0, 5*time.Second),
			limited(ok, "llm-budget", 10, second, 5, 0, 5*time.Second))
		// 1 + 1 with none left: both statuses are over the limit.
		resp = h.call(t, request("llm", desc("user", "gina"), desc("user", "gina", "route", "/v1/chat")))
		expect(t, "over", resp, over,
			hdrs("x-ratelimit-limit", "10", "x-ratelimit-remaining", "0", "x-ratelimit-reset", "5", "retry-after", "1"),
			limited(over, "llm-budget", 10, second, 5, 0, 5*time.Second),
			limited(over, "llm-budget", 10, second, 5, 0, 5*time.Second))
	})
}

// Descriptors and domains that select no limit are OK, with no
// current_limit and no headers; "domain" selects limits that match on it.
func TestSelectsNothing(t *testing.T) {
	t.Parallel()
	cfg := `
limits:
  - name: edge-ip
    match: {domain: edge}
    key: [ip]
    algorithm: fixed_window
    limit: 2/min
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		h := start(t, store, parseConfig(t, cfg))
		for _, r := range []*rlspb.RateLimitRequest{
			request("other", desc("ip", "10.0.0.1")),           // unknown domain
			request("edge", desc("user", "alice")),             // no ip: no key
			request("edge", desc("generic_key", "anything")),   // unknown descriptor
			request("other", desc("ip", "1"), desc("ip", "2")), // several, none selected
		} {
			resp := h.call(t, r)
			want := make([]*rlspb.RateLimitResponse_DescriptorStatus, len(r.Descriptors))
			for i := range want {
				want[i] = unlimited()
			}
			expect(t, prototext.Format(r), resp, ok, nil, want...)
		}
		for i, code := range []rlspb.RateLimitResponse_Code{ok, ok, over} {
			resp := h.call(t, request("edge", desc("ip", "10.0.0.1")))
			// Fixed windows of a minute, aligned to the epoch: base is on
			// a minute, so the window resets in 60s.
			if resp.OverallCode != code || !proto.Equal(resp.Statuses[0], limited(code, "edge-ip", 2, minute, 1, uint32(max(0, 1-i)), time.Minute)) {
				t.Fatalf("edge request %d: %v", i, prototext.Format(resp))
			}
		}
	})
}

// A store failure under a fail-closed limit answers OVER_LIMIT with the
// store header and a raw_body naming the limits, so that it is closed
// behind an Envoy that admits on errors (failure_mode_deny: false, its
// default); a request selecting only fail-open limits is decided on the
// local budget. Both recover when Redis is back.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	cfg := parseConfig(t, `
limits:
  - name: strict
    match: {route: /closed}
    key: [user]
    algorithm: fixed_window
    limit: 10/min
    failure_mode: closed
  - name: lenient
    match: {route: /open}
    key: [user]
    algorithm: fixed_window
    limit: 10/min
    failure_mode: open
`)
	h := start(t, "redis", cfg, func(o *service.Options) {
		o.StoreTimeout = time.Second
		o.BreakerThreshold = 1
		o.BreakerCooldown = time.Second
	})
	h.call(t, request("api", desc("user", "a", "route", "/closed")))
	h.redis.Stop()

	closedBody := "tokenlimit: the store is failing and these limits fail closed: strict\n"
	resp := h.call(t, request("api", desc("user", "a", "route", "/closed")))
	expectClosed(t, "fail-closed limit with Redis stopped", resp, closedBody, &rlspb.RateLimitResponse_DescriptorStatus{Code: over})
	// One fail-closed descriptor makes the whole request over the limit;
	// the fail-open descriptor's own status is OK.
	resp = h.call(t, request("api", desc("user", "a", "route", "/open"), desc("user", "a", "route", "/closed")))
	expectClosed(t, "mixed request with Redis stopped", resp, closedBody,
		&rlspb.RateLimitResponse_DescriptorStatus{Code: ok}, &rlspb.RateLimitResponse_DescriptorStatus{Code: over})
	resp = h.call(t, request("api", desc("user", "a", "route", "/open")))
	expect(t, "fail-open limit with Redis stopped", resp, ok,
		hdrs("x-ratelimit-limit", "10", "x-ratelimit-remaining", "9", "x-ratelimit-reset", "60"),
		limited(ok, "lenient", 10, minute, 1, 9, time.Minute))

	// Once Redis is back, a trial call after each breaker cooldown
	// (1s on the fake clock) finds it; the client may need a few tries to
	// reconnect.
	h.redis.Restart()
	for attempt := 1; ; attempt++ {
		h.clock.Advance(time.Second)
		resp = h.call(t, request("api", desc("user", "a", "route", "/closed")))
		if resp.OverallCode == ok {
			break
		}
		if attempt == 50 {
			t.Fatalf("attempt %d after Redis came back: %v", attempt, prototext.Format(resp))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if resp.OverallCode != ok || resp.Statuses[0].GetCurrentLimit().GetName() != "strict" {
		t.Fatalf("after Redis came back: %v", prototext.Format(resp))
	}
}

// expectClosed checks an answer of fail-closed limits the store could not
// decide: OVER_LIMIT, the store header alone, body as raw_body and
// statuses.
func expectClosed(t *testing.T, step string, got *rlspb.RateLimitResponse, body string, statuses ...*rlspb.RateLimitResponse_DescriptorStatus) {
	t.Helper()
	want := &rlspb.RateLimitResponse{OverallCode: over, Statuses: statuses, RawBody: []byte(body),
		ResponseHeadersToAdd: hdrs(rlsv3.StoreHeader, rlsv3.StoreUnavailable)}
	if !proto.Equal(got, want) {
		t.Errorf("%s:\n got %s\nwant %s", step, prototext.Format(got), prototext.Format(want))
	}
}

// Invalid requests answer InvalidArgument naming the field, and charge
// nothing.
func TestInvalidArgument(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 257)
	negative := desc("user", "a")
	negative.IsNegativeHits = true
	tooMany := request("llm")
	for i := range rlsv3.MaxDescriptors + 1 {
		tooMany.Descriptors = append(tooMany.Descriptors, desc("user", fmt.Sprint(i)))
	}
	cases := []struct {
		name  string
		req   *rlspb.RateLimitRequest
		field string
	}{
		{"no domain", request("", desc("user", "a")), "domain:"},
		{"no descriptors", request("llm"), "descriptors:"},
		{"too many descriptors", tooMany, "descriptors: at most 32"},
		{"no entries", request("llm", desc("user", "a"), desc()), "descriptors[1].entries:"},
		{"empty key", request("llm", desc("", "a")), "descriptors[0].entries[0].key:"},
		{"domain entry", request("llm", desc("user", "a", "domain", "x")), "descriptors[0].entries[1].key: \"domain\" is reserved"},
		{"repeated key", request("llm", desc("user", "a", "route", "/", "user", "b")), "descriptors[0].entries[2].key: \"user\" repeats entries[0]"},
		{"negative hits", request("llm", negative), "descriptors[0].is_negative_hits:"},
		{"descriptor hits_addend too big", request("llm", desc("user", "a"), hits(desc("user", "b"), 1<<41)), "descriptors[1].hits_addend: at most"},
		{"value too long", request("llm", desc("user", "a"), desc("user", long)), "descriptors[1].entries.user: at most 256 bytes"},
	}
	testkit.EachStore(t, func(t *testing.T, store string) {
		h := start(t, store, loadConfig(t, "../../examples/quickstart.yaml"))
		for _, c := range cases {
			_, err := h.client.ShouldRateLimit(context.Background(), c.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.field) {
				t.Errorf("%s: %v, want InvalidArgument naming %q", c.name, err, c.field)
			}
		}
		// Nothing was charged: user a's bucket is full.
		resp := h.call(t, request("llm", desc("user", "a", "route", "/v1/chat")))
		if resp.Statuses[0].LimitRemaining != 9 {
			t.Errorf("after the invalid requests: %v, want 9 left", prototext.Format(resp))
		}
	})
}

func TestRegisterRejectsNil(t *testing.T) {
	t.Parallel()
	st, _ := memstore.New(memstore.Options{})
	svc, err := service.New(loadConfig(t, "../../examples/quickstart.yaml"), service.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := rlsv3.Register(nil, svc, rlsv3.Options{}); err == nil {
		t.Error("Register(nil server): no error")
	}
	if err := rlsv3.Register(grpc.NewServer(), nil, rlsv3.Options{}); err == nil {
		t.Error("Register(nil service): no error")
	}
}

// current_limit comes from the limit each descriptor was decided under:
// calendar quotas are one DAY or MONTH, a GCRA's window is its burst's
// refill time, and an api key's override replaces the configured limit.
func TestCurrentLimitFromDecidedLimit(t *testing.T) {
	t.Parallel()
	cfg := `
default_plan: free
plans:
  free: {daily: 5, monthly: 100}
  big: {daily: 1000, monthly: 30}
limits:
  - name: per-key
    match: {plan: none}
    key: [api_key]
    algorithm: gcra
    rate: 60/min
    max_burst: 19
api_keys:
  k-big: {plan: big}
  k-pro:
    overrides:
      per-key: {rate: 120/h, max_burst: 239}
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		h := start(t, store, parseConfig(t, cfg))
		// The free plan's daily quota (5 of 5 and 100) is the tightest; it
		// resets at midnight UTC, 14h after base (10:00).
		resp := h.call(t, request("api", desc("api_key", "k-free")))
		expect(t, "daily quota", resp, ok,
			hdrs("x-ratelimit-limit", "5", "x-ratelimit-remaining", "4", "x-ratelimit-reset", "50400"),
			limited(ok, "plan-free-daily", 5, day, 1, 4, 14*time.Hour))
		// The big plan's monthly quota (30) is tighter than its daily one
		// (1000); it resets on April 1st, 29 days and 14 hours away.
		resp = h.call(t, request("api", desc("api_key", "k-big")))
		untilApril := (29*24 + 14) * time.Hour
		expect(t, "monthly quota", resp, ok,
			hdrs("x-ratelimit-limit", "30", "x-ratelimit-remaining", "29", "x-ratelimit-reset", fmt.Sprint(ceil(untilApril))),
			limited(ok, "plan-big-monthly", 30, month, 1, 29, untilApril))
		// The GCRA per key (for requests of plan "none", which no plan
		// quota selects) admits 20 at once (max_burst 19 + 1) and refills
		// 1/s: "20 per 20 seconds".
		for range 18 {
			h.call(t, request("api", desc("api_key", "k-gcra", "plan", "none")))
		}
		resp = h.call(t, request("api", desc("api_key", "k-gcra", "plan", "none")))
		expect(t, "per-key", resp, ok,
			hdrs("x-ratelimit-limit", "20", "x-ratelimit-remaining", "1", "x-ratelimit-reset", "19"),
			limited(ok, "per-key", 20, second, 20, 1, 19*time.Second))
		// k-pro's override: 240 at once refilling 120/h, "240 per 2 hours".
		resp = h.call(t, request("api", desc("api_key", "k-pro", "plan", "none")))
		expect(t, "k-pro's override", resp, ok,
			hdrs("x-ratelimit-limit", "240", "x-ratelimit-remaining", "239", "x-ratelimit-reset", "30"),
			limited(ok, "per-key", 240, hour, 2, 239, 30*time.Second))
	})
}

// TestKeySpaceFull: a request that needs a new key while the embedded store
// is full is OVER_LIMIT, even for a limit that fails open: an error would
// let Envoy's failure_mode_deny decide, and it admits by default.
func TestKeySpaceFull(t *testing.T) {
	t.Parallel()
	cfg := parseConfig(t, `
limits:
  - name: lenient
    key: [user]
    algorithm: fixed_window
    limit: 10/min
    failure_mode: open
`)
	st, err := memstore.New(memstore.Options{MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, "memory", cfg, func(o *service.Options) { o.Store = st })
	if resp := h.call(t, request("api", desc("user", "a"))); resp.OverallCode != ok {
		t.Fatalf("the first user: %v", prototext.Format(resp))
	}
	if resp := h.call(t, request("api", desc("user", "b"))); resp.OverallCode != over {
		t.Errorf("a new user with the store full: %v, want OVER_LIMIT", prototext.Format(resp))
	}
	if resp := h.call(t, request("api", desc("user", "a"))); resp.OverallCode != ok {
		t.Errorf("the stored user with the store full: %v, want OK", prototext.Format(resp))
	}
}

// override sets a descriptor's limit override: perUnit per unit.
func override(d *commonpb.RateLimitDescriptor, perUnit uint32, unit typepb.RateLimitUnit) *commonpb.RateLimitDescriptor {
	d.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: perUnit, Unit: unit}
	return d
}

// A descriptor's limit override replaces the quota and period of the limits
// configured with rls_limit_override, lower or higher, in a budget apart
// from the configured one's; other limits ignore it, so a client cannot
// raise them.
func TestLimitOverride(t *testing.T) {
	t.Parallel()
	cfg := parseConfig(t, `
limits:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 10/min
    rls_limit_override: true
  - name: per-tenant
    key: [tenant]
    algorithm: fixed_window
    limit: 3/min
  - name: bucket
    key: [team]
    algorithm: token_bucket
    capacity: 5
    refill: 5/min
    rls_limit_override: true
`)
	testkit.EachStore(t, func(t *testing.T, store string) {
		h := start(t, store, cfg)
		ann := func() *commonpb.RateLimitDescriptor {
			return override(desc("user", "ann"), 2, typepb.RateLimitUnit_SECOND)
		}
		for i, left := range []uint32{1, 0} {
			expect(t, fmt.Sprintf("ann's call %d at 2/s", i+1), h.call(t, request("api", ann())), ok,
				hdrs("x-ratelimit-limit", "2", "x-ratelimit-remaining", fmt.Sprint(left), "x-ratelimit-reset", "1"),
				limited(ok, "per-user", 2, second, 1, left, time.Second))
		}
		expect(t, "ann's third call at 2/s", h.call(t, request("api", ann())), over,
			hdrs("x-ratelimit-limit", "2", "x-ratelimit-remaining", "0", "x-ratelimit-reset", "1", "retry-after", "1"),
			limited(over, "per-user", 2, second, 1, 0, time.Second))
		// The configured budget of ann is its own, untouched.
		expect(t, "ann without an override", h.call(t, request("api", desc("user", "ann"))), ok,
			hdrs("x-ratelimit-limit", "10", "x-ratelimit-remaining", "9", "x-ratelimit-reset", "60"),
			limited(ok, "per-user", 10, minute, 1, 9, time.Minute))
		// The next second is a new window of the override.
		h.clock.Advance(time.Second)
		expect(t, "ann a second later", h.call(t, request("api", ann())), ok,
			hdrs("x-ratelimit-limit", "2", "x-ratelimit-remaining", "1", "x-ratelimit-reset", "1"),
			limited(ok, "per-user", 2, second, 1, 1, time.Second))
		// Higher than configured, where allowed: 1000 per 2 hours.
		raised := override(desc("user", "bob"), 1000, typepb.RateLimitUnit_HOUR)
		raised.Limit.UnitMultiplier = wrapperspb.UInt32(2)
		expect(t, "bob at 1000 per 2h", h.call(t, request("api", raised)), ok,
			hdrs("x-ratelimit-limit", "1000", "x-ratelimit-remaining", "999", "x-ratelimit-reset", "7199"),
			limited(ok, "per-user", 1000, hour, 2, 999, 7199*time.Second))
		// A bucket takes the override as its capacity and refill.
		expect(t, "a bucket at 20 per minute", h.call(t, request("api", override(desc("team", "red"), 20, typepb.RateLimitUnit_MINUTE))), ok,
			hdrs("x-ratelimit-limit", "20", "x-ratelimit-remaining", "19", "x-ratelimit-reset", "3"),
			limited(ok, "bucket", 20, minute, 1, 19, 3*time.Second))
		// per-tenant does not allow overrides: 3 a minute whatever is asked.
		for i := range 4 {
			resp := h.call(t, request("api", override(desc("tenant", "acme"), 100, typepb.RateLimitUnit_SECOND)))
			want := ok
			if i == 3 {
				want = over
			}
			if st := resp.Statuses[0]; resp.OverallCode != want || st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != minute {
				t.Errorf("acme's call %d asking 100/s: %v, want %v under 3 per minute", i+1, prototext.Format(resp), want)
			}
		}
	})
}

func TestLimitOverrideInvalid(t *testing.T) {
	t.Parallel()
	multiplied := func(d *commonpb.RateLimitDescriptor, m uint32) *commonpb.RateLimitDescriptor {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(m)
		return d
	}
	cases := []struct {
		name  string
		d     *commonpb.RateLimitDescriptor
		field string
	}{
		{"unknown unit", override(desc("user", "a"), 5, typepb.RateLimitUnit_UNKNOWN), "descriptors[0].limit.unit: want SECOND"},
		{"zero requests", override(desc("user", "a"), 0, typepb.RateLimitUnit_SECOND), "descriptors[0].limit.requests_per_unit: must be at least 1"},
		{"zero multiplier", multiplied(override(desc("user", "a"), 5, typepb.RateLimitUnit_SECOND), 0), "descriptors[0].limit.unit_multiplier: must be at least 1"},
		{"two years", multiplied(override(desc("user", "a"), 5, typepb.RateLimitUnit_YEAR), 2), "descriptors[0].limit: 2 x YEAR is longer than"},
		{"huge multiplier", multiplied(override(desc("user", "a"), 5, typepb.RateLimitUnit_YEAR), math.MaxUint32), "descriptors[0].limit: 4294967295 x YEAR"},
		{"a sliding counter's year", override(desc("team", "a"), 5, typepb.RateLimitUnit_YEAR), "a sliding counter's window must be at most"},
	}
	cfg := parseConfig(t, `
limits:
  - {name: per-user, key: [user], algorithm: fixed_window, limit: 10/min, rls_limit_override: true}
  - {name: per-team, key: [team], algorithm: sliding_counter, limit: 10/min, rls_limit_override: true}
`)
	testkit.EachStore(t, func(t *testing.T, store string) {
		h := start(t, store, cfg)
		for _, c := range cases {
			_, err := h.client.ShouldRateLimit(context.Background(), request("api", c.d))
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.field) {
				t.Errorf("%s: %v, want InvalidArgument naming %q", c.name, err, c.field)
			}
		}
		if left := h.call(t, request("api", desc("user", "a"))).Statuses[0].LimitRemaining; left != 9 {
			t.Errorf("after the invalid requests user a has %d left, want 9: nothing charged", left)
		}
	})
}
