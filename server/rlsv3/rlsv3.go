// Package rlsv3 serves Envoy's Rate Limit Service v3 over gRPC
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), so that
// Envoy, Istio and other Envoy-based gateways can call tokenlimit directly.
// It is the only package that imports Envoy's protos.
//
// Each descriptor of a RateLimitRequest becomes one service.Request whose
// descriptors are the descriptor's entries plus "domain", the request's
// domain; its cost is the descriptor's hits_addend, else the request's, else
// 1. All descriptors are decided in one atomic check: if any enforced limit
// denies, nothing is charged. docs/rls.md has the full mapping and an Envoy
// configuration.
package rlsv3

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/envoycompat"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/ratelimitheader"
	"github.com/tokenlimit/tokenlimit/service"
)

// Options configures the gRPC service. The zero value is ready to use.
type Options struct {
	// Logger receives debug logs of refused requests and of answers made
	// while the store is failing; slog.Default() when nil. The service
	// logs store failures itself.
	Logger *slog.Logger
	// AuthFailures, if not nil, counts the requests whose api_key is a
	// plane secret that names no usable key, per client (see
	// refusedKey), and tells when a client is past its budget; nil counts
	// nothing. It may be the budget a server's admin tokens count their
	// failures in.
	AuthFailures *httpx.AuthFailures
}

// Bounds on one RateLimitRequest.
const (
	// MaxDescriptors is the most descriptors one request may carry.
	MaxDescriptors = tokenlimit.MaxItems
	// MaxEntries is the most entries one descriptor may carry.
	MaxEntries = 16
)

// DomainDescriptor is the descriptor that carries the request's domain, so
// that limits can select a domain with match: {domain: NAME}.
const DomainDescriptor = "domain"

// Register registers the Rate Limit Service on s, answering with svc.
func Register(s *grpc.Server, svc *service.Service, opts Options) error {
	if s == nil || svc == nil {
		return errors.New("rlsv3: Register needs a gRPC server and a service")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	rlspb.RegisterRateLimitServiceServer(s, &server{svc: svc, log: opts.Logger, auth: opts.AuthFailures})
	return nil
}

type server struct {
	rlspb.UnimplementedRateLimitServiceServer
	svc    *service.Service
	log    *slog.Logger
	auth   *httpx.AuthFailures // nil: refused secrets are not counted
	limits limitCache
	// maps holds the descriptor maps of answered requests, emptied, for
	// later ones: the service reads a request's descriptors only while
	// it decides.
	maps sync.Pool
}

var _ rlspb.RateLimitServiceServer = (*server)(nil)

// ShouldRateLimit decides every descriptor of req in one atomic check. A
// store failure under a fail-closed limit answers OVER_LIMIT with
// StoreHeader (see closed), so that it is closed whatever the filter's
// failure_mode_deny; an invalid request answers codes.InvalidArgument
// naming the field.
func (s *server) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	var buf [4]service.Request // the usual few descriptors stay off the heap
	reqs, err := requests(req, buf[:0], &s.maps)
	defer reuse(reqs, &s.maps)
	if err != nil {
		s.log.DebugContext(ctx, "rls: invalid request", "error", err)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	d, policies, err := s.svc.CheckMerged(ctx, reqs...)
	if errors.Is(err, service.ErrUnauthorized) {
		return s.refusedKey(ctx, reqs, err), nil
	}
	if err != nil {
		return nil, s.checkError(ctx, err)
	}
	if d.Unavailable {
		return s.closed(ctx, d, len(reqs)), nil
	}
	return response(d, policies, len(reqs), &s.limits), nil
}

// StoreHeader is the response header of an answer the store could not give:
// OVER_LIMIT because a fail-closed limit (or a fail-open one with no local
// budget left) could not be decided, with StoreUnavailable as its value.
// Envoy adds it to the response it sends the client, with the answer's
// raw_body as the body, so a client can tell an outage from its own
// budget running out.
const (
	StoreHeader      = "x-tokenlimit-store"
	StoreUnavailable = "unavailable"
)

// AuthHeader is the response header of an answer refused for its api key
// (a plane secret that names no usable key): AuthRefused, or
// AuthTooManyFailures once the client is past its budget of failed
// authentications. Envoy adds it to the 429 it sends the client, with the
// answer's raw_body, which says why.
const (
	AuthHeader          = "x-tokenlimit-auth"
	AuthRefused         = "refused"
	AuthTooManyFailures = "too-many-failures"
)

// refusedKey answers a request, reqs, whose api_key is a plane secret
// that names no usable key (err says why): OVER_LIMIT for every
// descriptor, never an error status, which a default Envoy admits. The
// refusal is counted against the client: the first remote_address entry
// of the descriptors (Envoy's remote_address action), else the first ip
// entry, else the gRPC peer (a gateway's address, shared by its callers;
// see httpx.KeyClient); past its budget the answer says so, with
// retry-after.
func (s *server) refusedKey(ctx context.Context, reqs []service.Request, err error) *rlspb.RateLimitResponse {
	client := httpx.KeyClient(peerAddr(ctx), reqs)
	value, msg := AuthRefused, "tokenlimit: the api key was refused: "+httpx.RefusalReason(err)
	headers := []*corepb.HeaderValue{{Key: AuthHeader, Value: value}}
	if d, over := s.auth.RefusedKey(ctx, client); over {
		wait := httpx.RetryAfter(d)
		value, msg = AuthTooManyFailures, fmt.Sprintf("tokenlimit: too many failed authentications from %s: try again in %s", client, wait.Round(time.Millisecond))
		headers = []*corepb.HeaderValue{{Key: AuthHeader, Value: value},
			{Key: "retry-after", Value: strconv.FormatInt(ratelimitheader.Seconds(wait), 10)}}
	}
	s.log.DebugContext(ctx, "rls: api key refused", "client", client, "answer", value)
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT, ResponseHeadersToAdd: headers,
		RawBody: []byte(msg + "\n"), Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(reqs))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OVER_LIMIT}
	}
	return resp
}

// peerAddr is the IP address of the gRPC peer of ctx; "unknown" without
// one.
func peerAddr(ctx context.Context) string {
	if p, ok := grpcpeer.FromContext(ctx); ok && p.Addr != nil {
		return httpx.AddrHost(p.Addr.String())
	}
	return "unknown"
}

// closed answers a decision the store could not give and that fails
// closed: OVER_LIMIT whatever the filter's failure_mode_deny, since an
// error status would be admitted by a default Envoy. The descriptors that
// selected the fail-closed limits are OVER_LIMIT (all of them when no limit
// is named: the local budget itself failed), the others OK; StoreHeader
// and raw_body say why.
func (s *server) closed(ctx context.Context, d service.Decision, n int) *rlspb.RateLimitResponse {
	names := unavailable(d)
	msg := "tokenlimit: the store is failing and no local budget is left"
	if len(names) > 0 {
		msg = "tokenlimit: the store is failing and these limits fail closed: " + strings.Join(names, ", ")
	}
	s.log.DebugContext(ctx, "rls: unavailable", "reason", msg)
	resp := &rlspb.RateLimitResponse{
		OverallCode:          rlspb.RateLimitResponse_OVER_LIMIT,
		Statuses:             make([]*rlspb.RateLimitResponse_DescriptorStatus, n),
		ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: StoreHeader, Value: StoreUnavailable}},
		RawBody:              []byte(msg + "\n"),
	}
	for r := range resp.Statuses {
		code := rlspb.RateLimitResponse_OK
		if len(names) == 0 || slices.ContainsFunc(d.Limits, func(o service.Outcome) bool { return o.Request == r && !o.FailOpen && !o.Shadow }) {
			code = rlspb.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses[r] = &rlspb.RateLimitResponse_DescriptorStatus{Code: code}
	}
	return resp
}

func (s *server) checkError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, service.ErrInvalidRequest) || errors.Is(err, tokenlimit.ErrInvalid):
		s.log.DebugContext(ctx, "rls: invalid request", "error", err)
		return status.Error(codes.InvalidArgument, rlsFields.Replace(err.Error()))
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Internal, "tokenlimit: %v", err)
}

// rlsFields renames the service's field paths as the RLS request's: each
// descriptor is one service request, and its hits_addend the request's cost.
var rlsFields = strings.NewReplacer(
	"requests[", "descriptors[",
	"].descriptors.", "].entries.",
	"].descriptors:", "].entries:",
	"].cost:", "].hits_addend:",
)

// requests maps an RLS request to service requests, one per descriptor,
// appended to out, their descriptor maps taken from maps (or made) and
// emptied.
func requests(req *rlspb.RateLimitRequest, out []service.Request, maps *sync.Pool) ([]service.Request, error) {
	domain := req.GetDomain()
	switch n := len(req.GetDescriptors()); {
	case domain == "":
		return nil, errors.New("domain: must not be empty")
	case n == 0:
		return nil, errors.New("descriptors: at least one descriptor is required")
	case n > MaxDescriptors:
		return nil, fmt.Errorf("descriptors: at most %d per request, got %d", MaxDescriptors, n)
	}
	for i, desc := range req.Descriptors {
		entries := desc.GetEntries()
		switch {
		case len(entries) == 0:
			return nil, fmt.Errorf("descriptors[%d].entries: at least one entry is required", i)
		case len(entries) > MaxEntries:
			return nil, fmt.Errorf("descriptors[%d].entries: at most %d per descriptor, got %d", i, MaxEntries, len(entries))
		case desc.GetIsNegativeHits():
			return nil, fmt.Errorf("descriptors[%d].is_negative_hits: refunds are not supported over RLS; use the HTTP API's reserve and settle", i)
		}
		m, _ := maps.Get().(map[string]string)
		if m == nil {
			m = make(map[string]string, len(entries)+1)
		}
		for j, e := range entries {
			key := e.GetKey()
			switch {
			case key == "":
				return nil, fmt.Errorf("descriptors[%d].entries[%d].key: must not be empty", i, j)
			case key == DomainDescriptor:
				return nil, fmt.Errorf("descriptors[%d].entries[%d].key: %q is reserved for the request's domain", i, j, key)
			}
			m[key] = e.GetValue()
			if len(m) == j { // the key was there: it repeats an earlier entry
				k := slices.IndexFunc(entries, func(e *commonpb.RateLimitDescriptor_Entry) bool { return e.GetKey() == key })
				return nil, fmt.Errorf("descriptors[%d].entries[%d].key: %q repeats entries[%d]", i, j, key, k)
			}
		}
		m[DomainDescriptor] = domain
		cost, err := cost(req, i)
		if err != nil {
			return nil, err
		}
		r := service.Request{Descriptors: m, Cost: cost}
		if o := desc.GetLimit(); o != nil {
			if r.Limit, err = requestLimit(o, i); err != nil {
				return nil, err
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// requestLimit is descriptor i's limit override as the service takes it:
// requests_per_unit per unit x unit_multiplier (1 when unset), the units'
// windows those of envoyproxy/ratelimit (a month is 30 days, a year 365).
// Limits configured with rls_limit_override apply it; the others ignore it.
func requestLimit(o *commonpb.RateLimitDescriptor_RateLimitOverride, i int) (*service.RequestLimit, error) {
	secs := envoycompat.Unit(o.GetUnit()).Seconds()
	if secs == 0 {
		return nil, fmt.Errorf("descriptors[%d].limit.unit: want SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR, got %v", i, o.GetUnit())
	}
	if o.GetRequestsPerUnit() == 0 {
		return nil, fmt.Errorf("descriptors[%d].limit.requests_per_unit: must be at least 1", i)
	}
	mult := int64(1)
	if m := o.GetUnitMultiplier(); m != nil {
		if m.GetValue() == 0 {
			return nil, fmt.Errorf("descriptors[%d].limit.unit_multiplier: must be at least 1 when set", i)
		}
		mult = int64(m.GetValue())
	}
	if secs*mult > int64(tokenlimit.MaxPeriod/time.Second) { // secs < 2^25, mult < 2^32: no overflow
		return nil, fmt.Errorf("descriptors[%d].limit: %d x %v is longer than %v", i, mult, o.GetUnit(), tokenlimit.MaxPeriod)
	}
	return &service.RequestLimit{Quota: int64(o.GetRequestsPerUnit()), Period: time.Duration(secs*mult) * time.Second}, nil
}

// reuse empties the descriptor maps of reqs and puts them in maps.
func reuse(reqs []service.Request, maps *sync.Pool) {
	for _, r := range reqs {
		clear(r.Descriptors)
		maps.Put(r.Descriptors)
	}
}

// cost is descriptor i's hits_addend if set, else the request's, else 1.
// Zero at either level counts as 1: proto3 cannot tell an unset request
// hits_addend from 0, and Envoy documents the unset value as 1.
func cost(req *rlspb.RateLimitRequest, i int) (int64, error) {
	n := uint64(req.GetHitsAddend())
	field := "hits_addend"
	if h := req.Descriptors[i].GetHitsAddend(); h != nil {
		n, field = h.GetValue(), fmt.Sprintf("descriptors[%d].hits_addend", i)
	}
	switch {
	case n == 0:
		return 1, nil
	case n > tokenlimit.MaxCost:
		return 0, fmt.Errorf("%s: at most %d, got %d", field, int64(tokenlimit.MaxCost), n)
	}
	return int64(n), nil
}

// unavailable lists the limits that could not be decided, once each.
func unavailable(d service.Decision) []string {
	var names []string
	for _, o := range d.Limits {
		if !o.FailOpen && !slices.Contains(names, o.Name) {
			names = append(names, o.Name)
		}
	}
	return names
}

// response builds the answer: one status per descriptor from the enforced
// limits it selected, and the rate-limit headers of the tightest limit. The
// messages of one answer are allocated together (answerBlock), and the
// current_limit of each limit comes from limits, built once per limit.
func response(d service.Decision, policies []service.Policy, n int, limits *limitCache) *rlspb.RateLimitResponse {
	resp, statuses, durations, headers := newAnswer(n)
	resp.OverallCode = rlspb.RateLimitResponse_OK
	if !d.Allowed {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	for r := range statuses {
		st := &statuses[r]
		descriptorStatus(st, &durations[r], d, policies, r, limits)
		resp.Statuses[r] = st
	}
	if t, ok := d.Tightest(); ok {
		resp.ResponseHeadersToAdd = fillHeaders(headers, t, policyOf(d, policies, t), !d.Allowed)
	}
	return resp
}

// answerBlock holds the messages of an answer with one descriptor, the
// common case, in one allocation.
type answerBlock struct {
	resp       rlspb.RateLimitResponse
	statusPtrs [1]*rlspb.RateLimitResponse_DescriptorStatus
	statuses   [1]rlspb.RateLimitResponse_DescriptorStatus
	durations  [1]durationpb.Duration
	headers    headerBlock
}

// headerBlock holds the rate-limit headers of an answer.
type headerBlock struct {
	ptrs   [6]*corepb.HeaderValue
	values [6]corepb.HeaderValue
}

// newAnswer returns an empty answer for n descriptors, its n statuses (to
// fill, then point Statuses at), a duration for each and room for the
// headers.
func newAnswer(n int) (*rlspb.RateLimitResponse, []rlspb.RateLimitResponse_DescriptorStatus, []durationpb.Duration, *headerBlock) {
	if n == 1 {
		b := new(answerBlock)
		b.resp.Statuses = b.statusPtrs[:]
		return &b.resp, b.statuses[:], b.durations[:], &b.headers
	}
	resp := &rlspb.RateLimitResponse{Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, n)}
	return resp, make([]rlspb.RateLimitResponse_DescriptorStatus, n), make([]durationpb.Duration, n), new(headerBlock)
}

// descriptorStatus fills st, the status of descriptor r: OK when no enforced
// limit selected it, otherwise over the limit if one of them denied, and
// the current limit, remaining and reset of the tightest of them (dur
// holds the reset).
func descriptorStatus(st *rlspb.RateLimitResponse_DescriptorStatus, dur *durationpb.Duration, d service.Decision, policies []service.Policy, r int, limits *limitCache) {
	st.Code = rlspb.RateLimitResponse_OK
	best := -1
	for i := range d.Limits {
		o := &d.Limits[i]
		if o.Shadow || o.Request != r {
			continue
		}
		if !o.Allowed {
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if best < 0 || service.Tighter(o.Result, d.Limits[best].Result) {
			best = i
		}
	}
	if best < 0 {
		return
	}
	t := &d.Limits[best]
	st.CurrentLimit = limits.get(t.Name, policyOf(d, policies, *t))
	st.LimitRemaining = clamp32(t.Remaining)
	dur.Seconds, dur.Nanos = int64(t.ResetAfter/time.Second), int32(t.ResetAfter%time.Second)
	st.DurationUntilReset = dur
}

// limitCache holds the current_limit message of each limit, built once:
// answers share them, which is safe as they are never modified once built
// (marshalling only reads them). It is safe for concurrent use: readers
// load an immutable map, and a new limit replaces the map with a copy.
type limitCache struct {
	mu sync.Mutex // serializes adding limits
	m  atomic.Pointer[map[limitID]*rlspb.RateLimitResponse_RateLimit]
}

// limitID names one limit's current_limit.
type limitID struct {
	name   string
	policy service.Policy
}

// limitCacheMax bounds the cached limits. They come from the configuration
// (api-key overrides and calendar windows included), so only reloads that
// keep changing limits could reach it; past it, messages are built per
// answer.
const limitCacheMax = 4096

// get returns the current_limit of the limit named name with policy p.
func (c *limitCache) get(name string, p service.Policy) *rlspb.RateLimitResponse_RateLimit {
	id := limitID{name, p}
	if m := c.m.Load(); m != nil {
		if rl, ok := (*m)[id]; ok {
			return rl
		}
	}
	rl := currentLimit(name, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil && len(*old) >= limitCacheMax {
		return rl
	}
	m := make(map[limitID]*rlspb.RateLimitResponse_RateLimit, 1)
	if old != nil {
		if cached, ok := (*old)[id]; ok {
			return cached
		}
		m = maps.Clone(*old)
	}
	m[id] = rl
	c.m.Store(&m)
	return rl
}

// Units of RateLimitResponse.RateLimit, longest first. MONTH only describes
// calendar month quotas (a fixed window of 30 days is DAY x 30); WEEK, which
// older Envoys do not know, and YEAR are not used.
var units = []struct {
	d    time.Duration
	unit rlspb.RateLimitResponse_RateLimit_Unit
}{
	{24 * time.Hour, rlspb.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlspb.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlspb.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlspb.RateLimitResponse_RateLimit_SECOND},
}

// currentLimit describes a limit as requests_per_unit per unit x
// unit_multiplier: the longest unit that divides the window exactly, with the
// multiplier that makes it exact (5s: SECOND x 5; 2h: HOUR x 2; 1 day: DAY).
// Calendar quotas are one DAY or MONTH. A window that is not a whole number
// of seconds is rounded to the nearest second (at least 1).
func currentLimit(name string, p service.Policy) *rlspb.RateLimitResponse_RateLimit {
	rl := &rlspb.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: clamp32(p.Limit)}
	switch p.Calendar {
	case config.Month:
		rl.Unit = rlspb.RateLimitResponse_RateLimit_MONTH
		return rl
	case config.Day:
		rl.Unit = rlspb.RateLimitResponse_RateLimit_DAY
		return rl
	}
	rl.Unit = rlspb.RateLimitResponse_RateLimit_SECOND
	mult := max(1, (p.Window+time.Second/2)/time.Second)
	for _, u := range units {
		if p.Window >= u.d && p.Window%u.d == 0 {
			rl.Unit, mult = u.unit, p.Window/u.d
			break
		}
	}
	if mult > 1 {
		rl.UnitMultiplier = wrapperspb.UInt32(uint32(min(mult, math.MaxUint32)))
	}
	return rl
}

// policyOf is the policy of outcome t of d: the one of the first outcome
// with its name and budget key.
func policyOf(d service.Decision, policies []service.Policy, t service.Outcome) service.Policy {
	for i, o := range d.Limits {
		if o.Name == t.Name && o.Key == t.Key && i < len(policies) {
			return policies[i]
		}
	}
	return service.Policy{}
}

// fillHeaders fills b with the rate-limit headers of the tightest limit, as
// package ratelimitheader renders them for every transport (X-RateLimit-*,
// the IETF RateLimit and RateLimit-Policy fields, and retry-after when
// denied and waiting can help), with lower-case names as HTTP/2 writes
// them, and returns them.
func fillHeaders(b *headerBlock, t service.Outcome, pol service.Policy, denied bool) []*corepb.HeaderValue {
	var values [6]string
	names, n := ratelimitheader.Of(t.Name, t.Result, denied, pol.Window).RenderLower(&values)
	for i := range n {
		b.values[i].Key, b.values[i].Value = names[i], values[i]
		b.ptrs[i] = &b.values[i]
	}
	return b.ptrs[:n]
}

func clamp32(v int64) uint32 {
	return uint32(min(max(v, 0), math.MaxUint32))
}
