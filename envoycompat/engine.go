package envoycompat

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// Request is a Rate Limit Service request, as Envoy sends it.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// HitsAddend is what every descriptor without its own hits_addend
	// adds; 0 counts as 1.
	HitsAddend uint32
}

// Descriptor is one descriptor of a Request.
type Descriptor struct {
	Entries []Entry
	// HitsAddend, if not nil, is what this descriptor adds; 0 checks
	// without counting.
	HitsAddend *uint64
	// Limit, if not nil, replaces the configuration's limit for this
	// descriptor (Envoy's limit override).
	Limit *Override
}

// Override is a limit sent in the request.
type Override struct {
	RequestsPerUnit uint32
	Unit            Unit
}

// Code is a status code, numbered as Envoy's RateLimitResponse.Code.
type Code int

// The codes.
const (
	CodeUnknown Code = iota
	OK
	OverLimit
)

// Response is the answer to a Request.
type Response struct {
	OverallCode Code
	// Statuses holds one status per request descriptor, in order.
	Statuses []Status
	// Headers are the rate-limit headers, when Options.Headers is set.
	Headers []Header
	// StoreUnavailable is set on an answer given by a failure mode (see
	// FailureModes): the store could not count the request.
	StoreUnavailable bool
}

// Status is one descriptor's answer.
type Status struct {
	Code Code
	// CurrentLimit is the limit that applied, nil when none did.
	CurrentLimit *CurrentLimit
	// LimitRemaining is what the window still admits: 0 when over the
	// limit, math.MaxUint32 for an unlimited descriptor.
	LimitRemaining uint32
	// DurationUntilReset is the time until the window ends, in whole
	// seconds, when HasReset.
	DurationUntilReset time.Duration
	// HasReset is true when a limit applied, except to a quota-mode
	// descriptor over its limit (envoyproxy/ratelimit leaves it out).
	HasReset bool
}

// CurrentLimit describes the limit that applied to a descriptor.
type CurrentLimit struct {
	RequestsPerUnit uint32
	Unit            Unit
	Name            string
}

// Header is one response header.
type Header struct {
	Key, Value string
}

// HeaderNames are the names of the rate-limit headers
// (envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
// LIMIT_RESET_HEADER).
type HeaderNames struct {
	Limit, Remaining, Reset string
}

// Options configures an Engine. The zero value is envoyproxy/ratelimit's
// default behaviour.
type Options struct {
	// Clock is the time source; time.Now when nil. A Redis store in
	// server-time mode decides at the Redis server's time instead.
	Clock func() time.Time
	// KeyPrefix is prepended to every budget's key (CACHE_KEY_PREFIX).
	KeyPrefix string
	// GlobalShadowMode answers OK overall even when over a limit
	// (SHADOW_MODE); statuses still say OVER_LIMIT.
	GlobalShadowMode bool
	// GlobalQuotaMode puts every limit in quota mode (QUOTA_MODE).
	GlobalQuotaMode bool
	// Headers, if not nil, adds the headers of the descriptor closest to
	// its limit (LIMIT_RESPONSE_HEADERS_ENABLED).
	Headers *HeaderNames
	// FailureModes says what each descriptor answers when the store fails
	// with an error matching resilient.ErrUnavailable (give New a
	// resilient.Store for a timeout and a breaker). The zero value fails
	// the call, as envoyproxy/ratelimit does. New and SetConfig refuse a
	// configuration in which a path names nothing (FailureModes.Check).
	FailureModes FailureModes
	// Registerer, if not nil, receives the engine's metrics: requests by
	// domain and code, hits by domain and stat, the time to answer and
	// the failed store calls (metrics.go).
	Registerer prometheus.Registerer
}

// Engine answers requests with envoyproxy/ratelimit's semantics: fixed
// windows of each limit's unit aligned to the Unix epoch, one counter per
// descriptor, every descriptor counted independently (there is no
// all-or-nothing), hits counted even when they are over the limit. It is
// safe for concurrent use; SetConfig swaps the configuration atomically.
type Engine struct {
	store   tokenlimit.Store
	cfg     atomic.Pointer[Config]
	opts    Options
	metrics *metrics
}

// ErrInvalidRequest marks a request the engine refuses; the error's
// message is envoyproxy/ratelimit's where it refuses the same request.
var ErrInvalidRequest = errors.New("invalid request")

// invalidError is an invalid request: its message alone, and Is
// ErrInvalidRequest.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalidRequest }

func invalid(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// counterQuota is the quota of the fixed windows that hold the counters:
// the largest there is, so that a store never refuses a hit and the count
// is the quota minus what remains.
const counterQuota = tokenlimit.MaxQuota

// New returns an engine deciding with cfg on store.
func New(store tokenlimit.Store, cfg *Config, opts Options) (*Engine, error) {
	if store == nil || cfg == nil {
		return nil, errors.New("envoycompat: New needs a store and a configuration")
	}
	if err := opts.FailureModes.Check(cfg); err != nil {
		return nil, fmt.Errorf("envoycompat: failure modes: %w", err)
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("envoycompat: metrics: %w", err)
	}
	e := &Engine{store: store, opts: opts, metrics: m}
	e.cfg.Store(cfg)
	return e, nil
}

// SetConfig makes cfg the configuration of the next requests; counters are
// kept (they are keyed by descriptor values and unit, not by the file). A
// configuration lacking a path of the failure modes is refused with
// FailureModes.Check's error, and the running one stays.
func (e *Engine) SetConfig(cfg *Config) error {
	if cfg == nil {
		return errors.New("envoycompat: SetConfig needs a configuration")
	}
	if err := e.opts.FailureModes.Check(cfg); err != nil {
		return err
	}
	e.cfg.Store(cfg)
	return nil
}

// Config returns the configuration in use.
func (e *Engine) Config() *Config { return e.cfg.Load() }

// applied is one descriptor's limit for one request.
type applied struct {
	limit     *RateLimit // nil: no limit applies
	unlimited bool
	hits      uint64
	key       string
	item      int // index into the store items
}

// ShouldRateLimit decides req. Over the limit is an answer, not an error;
// errors are invalid requests (ErrInvalidRequest) and store failures.
func (e *Engine) ShouldRateLimit(ctx context.Context, req Request) (Response, error) {
	start := time.Now()
	cfg := e.cfg.Load()
	label := req.Domain
	if cfg.domains[label] == nil {
		label = "" // a domain the configuration lacks: the label stays bounded
	}
	c := e.metrics.of(label)
	resp, err := e.decide(ctx, cfg, req, c)
	e.metrics.request(ctx, c, start, resp, err)
	return resp, err
}

// decide answers req with cfg, counting hits in c.
func (e *Engine) decide(ctx context.Context, cfg *Config, req Request, c *domainCounters) (Response, error) {
	switch {
	case req.Domain == "":
		return Response{}, invalid("rate limit domain must not be empty")
	case len(req.Descriptors) == 0:
		return Response{}, invalid("rate limit descriptor list must not be empty")
	}
	ds, err := e.limits(cfg, req)
	if err != nil {
		return Response{}, err
	}
	counts, err := e.count(ctx, ds)
	if errors.Is(err, resilient.ErrUnavailable) && ctx.Err() == nil {
		if resp, ok := e.failed(req.Domain, ds); ok {
			return resp, nil
		}
	}
	if err != nil {
		return Response{}, err
	}
	return e.respond(ds, counts, c), nil
}

// limits finds each descriptor's limit, applies unlimited and replaces, and
// names each budget.
func (e *Engine) limits(cfg *Config, req Request) ([]applied, error) {
	ds := make([]applied, len(req.Descriptors))
	replaced := map[string]bool{}
	for i, d := range req.Descriptors {
		var shared map[int]string
		if o := d.Limit; o != nil {
			if o.Unit.Seconds() == 0 {
				return nil, invalid("descriptors[%d].limit.unit: %v is not a unit", i, o.Unit)
			}
			ds[i].limit = &RateLimit{RequestsPerUnit: o.RequestsPerUnit, Unit: o.Unit}
		} else {
			ds[i].limit, shared = cfg.match(req.Domain, d.Entries)
		}
		ds[i].hits = max(1, uint64(req.HitsAddend))
		if d.HitsAddend != nil {
			ds[i].hits = *d.HitsAddend
		}
		if ds[i].hits > tokenlimit.MaxCost {
			return nil, invalid("descriptors[%d].hits_addend: at most %d, got %d", i, int64(tokenlimit.MaxCost), ds[i].hits)
		}
		l := ds[i].limit
		if l == nil {
			continue
		}
		for _, r := range l.Replaces {
			replaced[r] = true
		}
		if l.Unlimited {
			ds[i].limit, ds[i].unlimited = nil, true
			continue
		}
		ds[i].key = e.key(req.Domain, d.Entries, shared, l.Unit)
		if len(ds[i].key) > tokenlimit.MaxKeyLength {
			return nil, invalid("descriptors[%d]: the budget's key would be %d bytes, at most %d", i, len(ds[i].key), tokenlimit.MaxKeyLength)
		}
	}
	for i := range ds {
		if l := ds[i].limit; l != nil && l.Name != "" && replaced[l.Name] {
			ds[i].limit = nil
		}
	}
	return ds, nil
}

// key is the budget's key: envoyproxy/ratelimit's cache key (prefix,
// domain and every entry's key and value joined by '_') with the unit's
// seconds in place of the window's start, which the store adds itself.
func (e *Engine) key(domain string, entries []Entry, shared map[int]string, u Unit) string {
	var b strings.Builder
	b.WriteString(e.opts.KeyPrefix)
	b.WriteString(domain)
	b.WriteByte('_')
	for i, en := range entries {
		b.WriteString(en.Key)
		b.WriteByte('_')
		if p, ok := shared[i]; ok {
			b.WriteString(p)
		} else {
			b.WriteString(en.Value)
		}
		b.WriteByte('_')
	}
	b.WriteString("per")
	b.WriteString(strconv.FormatInt(u.Seconds(), 10))
	return b.String()
}

// counted is a descriptor's counter after its hits, and the time decided.
type counted struct {
	after uint64
	at    time.Time
}

// count adds every limited descriptor's hits to its counter, as one
// INCRBY each would: descriptors naming the same budget are added in
// order, each seeing the hits of those before it.
func (e *Engine) count(ctx context.Context, ds []applied) ([]counted, error) {
	var items []tokenlimit.Item
	index := map[string]int{}
	for i := range ds {
		if ds[i].limit == nil {
			continue
		}
		j, ok := index[ds[i].key]
		if !ok {
			j = len(items)
			index[ds[i].key] = j
			period := time.Duration(ds[i].limit.Unit.Seconds()) * time.Second
			items = append(items, tokenlimit.Item{Key: ds[i].key, Limit: tokenlimit.FixedWindowLimit(counterQuota, period)})
		}
		if items[j].Cost+int64(ds[i].hits) > tokenlimit.MaxCost {
			return nil, invalid("descriptors[%d].hits_addend: the hits on one budget add up to more than %d", i, int64(tokenlimit.MaxCost))
		}
		items[j].Cost += int64(ds[i].hits)
		ds[i].item = j
	}
	before := make([]uint64, len(items))
	at := make([]time.Time, len(items))
	for start := 0; start < len(items); start += tokenlimit.MaxItems {
		chunk := items[start:min(len(items), start+tokenlimit.MaxItems)]
		results := make([]tokenlimit.Result, len(chunk))
		t, err := e.store.Check(ctx, e.opts.Clock(), chunk, results)
		if err != nil {
			e.metrics.storeCall(err)
			return nil, fmt.Errorf("envoycompat: store: %w", err)
		}
		for k, r := range results {
			n := uint64(counterQuota - r.Remaining)
			if r.Allowed {
				n -= uint64(chunk[k].Cost)
			}
			before[start+k], at[start+k] = n, t
		}
	}
	out := make([]counted, len(ds))
	for i := range ds {
		if ds[i].limit == nil {
			continue
		}
		j := ds[i].item
		before[j] += ds[i].hits
		out[i] = counted{after: before[j], at: at[j]}
	}
	return out, nil
}

// respond builds the answer from the counters, as envoyproxy/ratelimit
// does: a descriptor is over its limit when its counter passed
// requests_per_unit, and the request is over the limit when a descriptor
// is. A quota-mode descriptor over its limit is reported OK (with its
// limit, no time until reset) and does not make the request over. Each
// limited descriptor's hits are counted in c.
func (e *Engine) respond(ds []applied, counts []counted, c *domainCounters) Response {
	resp := Response{OverallCode: OK, Statuses: make([]Status, len(ds))}
	minRemaining := uint32(math.MaxUint32)
	closest := -1
	for i := range ds {
		if ds[i].limit != nil {
			c.count(ds[i].limit, ds[i].hits, counts[i].after)
		}
		st := status(ds[i].limit, counts[i])
		if st.CurrentLimit != nil && st.LimitRemaining < minRemaining {
			closest, minRemaining = i, st.LimitRemaining
		}
		switch quota := e.opts.GlobalQuotaMode || (ds[i].limit != nil && ds[i].limit.QuotaMode); {
		case ds[i].unlimited:
			st = Status{Code: OK, LimitRemaining: math.MaxUint32}
		case st.Code == OverLimit && quota:
			st = Status{Code: OK, CurrentLimit: st.CurrentLimit, LimitRemaining: st.LimitRemaining}
		case st.Code == OverLimit:
			resp.OverallCode = OverLimit
			closest, minRemaining = i, 0
		}
		resp.Statuses[i] = st
	}
	if closest >= 0 && e.opts.Headers != nil {
		resp.Headers = e.headers(resp.Statuses[closest])
	}
	if resp.OverallCode == OverLimit && e.opts.GlobalShadowMode {
		resp.OverallCode = OK
	}
	return resp
}

func status(l *RateLimit, c counted) Status {
	if l == nil {
		return Status{Code: OK}
	}
	st := Status{
		Code:               OK,
		CurrentLimit:       &CurrentLimit{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit, Name: l.Name},
		DurationUntilReset: untilReset(l.Unit, c.at),
		HasReset:           true,
	}
	if limit := uint64(l.RequestsPerUnit); c.after > limit {
		st.Code = OverLimit
		if l.ShadowMode {
			st.Code = OK
		}
	} else {
		st.LimitRemaining = uint32(limit - c.after)
	}
	return st
}

// untilReset is the time from at, in whole seconds, to the end of its
// window of unit u.
func untilReset(u Unit, at time.Time) time.Duration {
	sec := u.Seconds()
	return time.Duration(sec-at.Unix()%sec) * time.Second
}

func (e *Engine) headers(st Status) []Header {
	h := e.opts.Headers
	return []Header{
		{Key: h.Limit, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
		{Key: h.Remaining, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{Key: h.Reset, Value: strconv.FormatInt(int64(untilReset(st.CurrentLimit.Unit, e.opts.Clock())/time.Second), 10)},
	}
}
