package sim

import (
	"context"
	"net/http"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// compareBody is the body of /ui/api/sim/compare.
type compareBody struct {
	// Pattern is the traffic: "boundary" (a burst of Limit requests just
	// before a window boundary, another just after it, a third later),
	// "steady" (1.5×Limit per window, evenly spaced) or "weighted" (Limit
	// per window, costing 1, 3, 1, 1, 3, ... like chat and embed calls).
	Pattern string `json:"pattern"`
	// Every algorithm gets the budget Limit per WindowMs: windows of that
	// length, or a bucket of Limit tokens refilling Limit per WindowMs.
	Limit    int64 `json:"limit"`
	WindowMs int64 `json:"window_ms"`
}

// compareAnswer is the pattern and each algorithm's decisions on it.
type compareAnswer struct {
	Pattern    string           `json:"pattern"`
	Limit      int64            `json:"limit"`
	WindowMs   int64            `json:"window_ms"`
	DurationMs int64            `json:"duration_ms"`
	Requests   []patternRequest `json:"requests"`
	Algorithms []algoRun        `json:"algorithms"`
}

// patternRequest is a request at TMs milliseconds after the start, which
// is a window boundary.
type patternRequest struct {
	TMs  int64 `json:"t_ms"`
	Cost int64 `json:"cost"`
}

// algoRun is one algorithm's decisions, one per request, and its remaining
// budget sampled along the run (cost-0 checks).
type algoRun struct {
	Algorithm        string            `json:"algorithm"`
	Policy           string            `json:"policy"`
	Decisions        []compareDecision `json:"decisions"`
	Samples          []sample          `json:"samples"`
	AdmittedRequests int64             `json:"admitted_requests"`
	AdmittedCost     int64             `json:"admitted_cost"`
	Denied           int64             `json:"denied"`
	// MaxInWindow is the most cost admitted in any interval one window
	// long: above Limit, the algorithm let a burst through.
	MaxInWindow int64 `json:"max_in_window"`
}

type compareDecision struct {
	Allowed      bool  `json:"allowed"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMs int64 `json:"retry_after_ms"`
}

type sample struct {
	TMs       int64 `json:"t_ms"`
	Remaining int64 `json:"remaining"`
}

// compareStart is when every comparison starts, a window boundary for
// every whole-second window (2026-01-01 UTC): runs are reproducible.
var compareStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// compareWindows is how many windows a comparison lasts; compareSamples how
// many times per window the remaining budget is sampled.
const (
	compareWindows = 3
	compareSamples = 40
)

// Compare serves POST /ui/api/sim/compare: the five algorithms on the
// same requests, each on its own budget in a fresh in-memory store, on a
// simulated clock (the run takes no real time).
func (sm *Simulators) Compare(w http.ResponseWriter, r *http.Request) {
	b := compareBody{Pattern: "boundary", Limit: 10, WindowMs: 10_000}
	if err := httpx.DecodeOptional(w, r, maxBodyBytes, &b); err != nil {
		httpx.Fail(w, err)
		return
	}
	reqs, err := pattern(b)
	if err != nil {
		httpx.Fail(w, err)
		return
	}
	ans := compareAnswer{Pattern: b.Pattern, Limit: b.Limit, WindowMs: b.WindowMs,
		DurationMs: compareWindows * b.WindowMs, Requests: reqs}
	window := time.Duration(b.WindowMs) * time.Millisecond
	for _, lim := range []tokenlimit.Limit{
		tokenlimit.FixedWindowLimit(b.Limit, window),
		tokenlimit.SlidingLogLimit(b.Limit, window),
		tokenlimit.SlidingCounterLimit(b.Limit, window),
		tokenlimit.TokenBucketLimit(b.Limit, b.Limit, window),
		tokenlimit.GCRALimit(b.Limit-1, b.Limit, window),
	} {
		run, err := replay(r.Context(), lim, reqs, b.WindowMs)
		if err != nil {
			httpx.Fail(w, err)
			return
		}
		ans.Algorithms = append(ans.Algorithms, run)
	}
	httpx.WriteJSON(w, http.StatusOK, ans)
}

// pattern returns b's requests, in time order.
func pattern(b compareBody) ([]patternRequest, error) {
	if err := checkRange("limit", b.Limit, 1, 100); err != nil {
		return nil, err
	}
	if err := checkRange("window_ms", b.WindowMs, 1000, 60_000); err != nil {
		return nil, err
	}
	p, l := float64(b.WindowMs), float64(b.Limit)
	var out []patternRequest
	add := func(t float64, cost int64) { out = append(out, patternRequest{TMs: int64(t), Cost: cost}) }
	switch b.Pattern {
	case "boundary":
		step := p / 10 / l // each burst takes a tenth of a window
		for _, from := range []float64{0.9 * p, p, 2.5 * p} {
			for k := range b.Limit {
				add(from+float64(k)*step, 1)
			}
		}
	case "steady":
		for t := 0.0; t < compareWindows*p; t += p / (1.5 * l) {
			add(t, 1)
		}
	case "weighted":
		costs := []int64{1, 3, 1, 1, 3}
		for k := 0; float64(k)*p/l < compareWindows*p; k++ {
			add(float64(k)*p/l, costs[k%len(costs)])
		}
	default:
		return nil, httpx.BadRequest("pattern", `want "boundary", "steady" or "weighted", got %q`, b.Pattern)
	}
	return out, nil
}

// replay decides reqs under lim on a simulated clock, sampling the
// remaining budget compareSamples times per window.
func replay(ctx context.Context, lim tokenlimit.Limit, reqs []patternRequest, windowMs int64) (algoRun, error) {
	store, err := memstore.New(memstore.Options{Shards: 1, MaxKeys: 4})
	if err != nil {
		return algoRun{}, err
	}
	var now time.Time
	limiter, err := tokenlimit.NewLimiter(store, tokenlimit.WithClock(func() time.Time { return now }))
	if err != nil {
		return algoRun{}, err
	}
	run := algoRun{Algorithm: lim.Algorithm.String(), Policy: lim.String(), Decisions: make([]compareDecision, len(reqs))}
	at := func(ms int64) time.Time { return compareStart.Add(time.Duration(ms) * time.Millisecond) }
	next := 0
	for s := int64(0); s <= compareWindows*compareSamples; s++ {
		t := s * windowMs / compareSamples
		for ; next < len(reqs) && reqs[next].TMs <= t; next++ {
			now = at(reqs[next].TMs)
			res, err := limiter.AllowN(ctx, "compare", lim, reqs[next].Cost)
			if err != nil {
				return algoRun{}, err
			}
			run.Decisions[next] = compareDecision{Allowed: res.Allowed, Remaining: res.Remaining, RetryAfterMs: httpx.Millis(res.RetryAfter)}
		}
		now = at(t)
		res, err := limiter.AllowN(ctx, "compare", lim, 0)
		if err != nil {
			return algoRun{}, err
		}
		run.Samples = append(run.Samples, sample{TMs: t, Remaining: res.Remaining})
	}
	run.tally(reqs, windowMs)
	return run, nil
}

// tally counts what run admitted, and the most cost it admitted in any
// interval (t - window, t]. reqs are in time order.
func (run *algoRun) tally(reqs []patternRequest, windowMs int64) {
	var admitted []patternRequest
	for i, dec := range run.Decisions {
		if !dec.Allowed {
			run.Denied++
			continue
		}
		run.AdmittedRequests++
		run.AdmittedCost += reqs[i].Cost
		admitted = append(admitted, reqs[i])
	}
	var sum int64
	first := 0
	for _, a := range admitted {
		sum += a.Cost
		for admitted[first].TMs <= a.TMs-windowMs {
			sum -= admitted[first].Cost
			first++
		}
		run.MaxInWindow = max(run.MaxInWindow, sum)
	}
}
