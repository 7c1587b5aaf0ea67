package envoycompat

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// The codes of tokenlimit_envoy_requests_total: how a request was
// answered.
const (
	codeOK           = iota // OK, decided on the store
	codeOverLimit           // OVER_LIMIT, decided on the store
	codeFailOpen            // OK by the failure modes, the store failing
	codeFailClosed          // OVER_LIMIT by the failure modes, the store failing
	codeUnavailable         // failed: the store failed (mode error) or another error
	codeKeySpaceFull        // failed: the store had no room for a new key
	codeInvalid             // refused: ErrInvalidRequest
	codeCanceled            // the caller gave up
	numCodes
)

var codeNames = [numCodes]string{"ok", "over_limit", "fail_open", "fail_closed", "unavailable", "key_space_full", "invalid", "canceled"}

// The stats of tokenlimit_envoy_hits_total, envoyproxy/ratelimit's per
// rule statistics summed per domain.
const (
	statTotal  = iota // every hit of a limited descriptor
	statOver          // hits past requests_per_unit
	statNear          // hits within the limit but past NearLimitRatio of it
	statWithin        // hits of descriptors within their limit
	statShadow        // hits of shadow-mode descriptors over their limit
	numStats
)

var statNames = [numStats]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"}

// NearLimitRatio is the share of requests_per_unit past which hits count
// as near_limit (envoyproxy/ratelimit's NEAR_LIMIT_RATIO default).
const NearLimitRatio = 0.8

// metrics are the engine's Prometheus metrics. Their labels are a
// configured domain ("" for any other) and a code or stat: never a
// descriptor's key or value, so the series are bounded by the domains the
// configurations have had.
type metrics struct {
	requests    *prometheus.CounterVec
	hits        *prometheus.CounterVec
	latency     prometheus.Histogram
	storeErrors prometheus.Counter
	// domains caches each domain's counters (domainCounters), so that a
	// request does not hash its label values.
	domains sync.Map
}

// domainCounters are one domain's children of requests and hits.
type domainCounters struct {
	requests [numCodes]prometheus.Counter
	hits     [numStats]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_envoy_requests_total",
			Help: "ShouldRateLimit requests by domain (empty for a domain the configuration lacks) and code: ok and over_limit (decided on the store), fail_open and fail_closed (answered by --envoy-failure-mode while the store fails), unavailable (failed: the store failed), key_space_full (failed: the embedded store is full), invalid, canceled (the caller gave up).",
		}, []string{"domain", "code"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_envoy_hits_total",
			Help: "Hits of limited descriptors by domain and stat, as envoyproxy/ratelimit's per-rule statistics summed per domain: total_hits, over_limit (past requests_per_unit), near_limit (within it, past 80% of it), within_limit, shadow_mode (over the limit in shadow mode).",
		}, []string{"domain", "stat"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tokenlimit_envoy_request_seconds",
			Help:    "Time to answer a ShouldRateLimit request, store round trips included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokenlimit_store_errors_total",
			Help: "Failed calls to the store (timeouts, connection errors); calls the open breaker skipped are not counted.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.hits, m.latency, m.storeErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// of returns the counters of domain, a configured domain or "".
func (m *metrics) of(domain string) *domainCounters {
	if c, ok := m.domains.Load(domain); ok {
		return c.(*domainCounters)
	}
	c := &domainCounters{}
	for i, name := range codeNames {
		c.requests[i] = m.requests.WithLabelValues(domain, name)
	}
	for i, name := range statNames {
		c.hits[i] = m.hits.WithLabelValues(domain, name)
	}
	got, _ := m.domains.LoadOrStore(domain, c)
	return got.(*domainCounters)
}

// request counts an answered request (resp, err) of domain (its label)
// that started at start.
func (m *metrics) request(ctx context.Context, c *domainCounters, start time.Time, resp Response, err error) {
	m.latency.Observe(time.Since(start).Seconds())
	c.requests[answerCode(ctx, resp, err)].Inc()
}

// storeCall counts a store call's error: a failed call, not one the open
// breaker skipped.
func (m *metrics) storeCall(err error) {
	var fe *resilient.FailedError
	if errors.As(err, &fe) && !errors.Is(fe.Err, resilient.ErrBreakerOpen) {
		m.storeErrors.Inc()
	}
}

// answerCode is the code label of an answer.
func answerCode(ctx context.Context, resp Response, err error) int {
	switch {
	case errors.Is(err, ErrInvalidRequest):
		return codeInvalid
	case err != nil && ctx.Err() != nil:
		return codeCanceled
	case errors.Is(err, tokenlimit.ErrStoreFull):
		return codeKeySpaceFull
	case err != nil:
		return codeUnavailable
	case resp.StoreUnavailable && resp.OverallCode == OverLimit:
		return codeFailClosed
	case resp.StoreUnavailable:
		return codeFailOpen
	case resp.OverallCode == OverLimit:
		return codeOverLimit
	}
	return codeOK
}

// count adds a limited descriptor's hits to c's stats as
// envoyproxy/ratelimit does: its counter went from after-hits to after,
// and the hits past requests_per_unit are over_limit, those past the near
// threshold near_limit.
func (c *domainCounters) count(l *RateLimit, hits, after uint64) {
	if hits == 0 {
		return
	}
	before := after - hits
	limit := uint64(l.RequestsPerUnit)
	near := uint64(math.Floor(float64(float32(l.RequestsPerUnit) * float32(NearLimitRatio)))) // in float32, as there
	c.hits[statTotal].Add(float64(hits))
	if after > limit {
		over := after - max(before, limit)
		c.hits[statOver].Add(float64(over))
		if before < limit {
			c.hits[statNear].Add(float64(limit - max(near, before)))
		}
		if l.ShadowMode {
			c.hits[statShadow].Add(float64(hits))
		}
		return
	}
	if after > near {
		c.hits[statNear].Add(float64(after - max(near, before)))
	}
	c.hits[statWithin].Add(float64(hits))
}
