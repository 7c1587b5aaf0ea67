package sim

import (
	"context"
	"net/http"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
)

// entry is one decision in a simulator's log.
type entry struct {
	N                int    `json:"n"`
	AtMs             int64  `json:"at_ms"`
	Kind             string `json:"kind,omitempty"`
	Cost             int64  `json:"cost"`
	Allowed          bool   `json:"allowed"`
	Remaining        int64  `json:"remaining"`
	RetryAfterMs     int64  `json:"retry_after_ms"`
	CostExceedsLimit bool   `json:"cost_exceeds_limit,omitempty"`
}

// simBody is the body of /ui/api/sim/window and /ui/api/sim/bucket.
// Parameters left out take the classic teaching values: a window of 5
// requests per 5 s; a bucket of 10 tokens refilling 2 per second.
type simBody struct {
	// Session is the id the previous answer gave; empty or expired starts
	// a new session.
	Session string `json:"session"`
	// Action is "send" (charge Cost, 1 by default for the window), "peek"
	// (report the state, charging nothing) or "reset" (empty the log and
	// make the budget whole).
	Action string `json:"action"`
	// The sliding window: Limit requests per WindowMs.
	Limit    int64 `json:"limit"`
	WindowMs int64 `json:"window_ms"`
	// The token bucket: Capacity tokens, refilling Refill per PerMs.
	Capacity int64 `json:"capacity"`
	Refill   int64 `json:"refill"`
	PerMs    int64 `json:"per_ms"`
	// Cost and Kind ("Chat", "Embed") of a bucket's send.
	Cost int64  `json:"cost"`
	Kind string `json:"kind"`
}

// simAnswer is the state of a simulator after the action.
type simAnswer struct {
	Session string `json:"session"`
	NowMs   int64  `json:"now_ms"`
	Policy  string `json:"policy"`
	// Limit is the most the budget admits at once, Remaining what it
	// admits now, ResetAfterMs the time until it is whole.
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	ResetAfterMs int64 `json:"reset_after_ms"`
	// Level is the bucket's exact content, fractions included.
	Level *float64 `json:"level,omitempty"`
	// Last is the decision of a send; Log the last decisions, oldest
	// first.
	Last *entry  `json:"last,omitempty"`
	Log  []entry `json:"log"`
}

// Bounds on the simulators' parameters: enough to play, small enough that a
// session stays tiny.
const (
	minSimPeriod = 100 * time.Millisecond
	maxSimPeriod = time.Hour
	maxSimQuota  = 10_000
)

// Window serves POST /ui/api/sim/window: the sliding window simulator,
// a sliding log of Limit requests per WindowMs in the session's sandbox.
func (sm *Simulators) Window(w http.ResponseWriter, r *http.Request) {
	b := simBody{Limit: 5, WindowMs: 5000}
	if err := httpx.DecodeOptional(w, r, maxBodyBytes, &b); err != nil {
		httpx.Fail(w, err)
		return
	}
	if err := checkRange("limit", b.Limit, 1, tokenlimit.MaxLogEntries); err != nil {
		httpx.Fail(w, err)
		return
	}
	period, err := simPeriod("window_ms", b.WindowMs)
	if err != nil {
		httpx.Fail(w, err)
		return
	}
	if b.Cost == 0 {
		b.Cost = 1
	}
	sm.simulate(w, r, b, tokenlimit.SlidingLogLimit(b.Limit, period), func(s *session) *simState { return &s.window })
}

// Bucket serves POST /ui/api/sim/bucket: the token bucket simulator, a
// bucket of Capacity tokens refilling Refill per PerMs, charged Cost per
// send.
func (sm *Simulators) Bucket(w http.ResponseWriter, r *http.Request) {
	b := simBody{Capacity: 10, Refill: 2, PerMs: 1000}
	if err := httpx.DecodeOptional(w, r, maxBodyBytes, &b); err != nil {
		httpx.Fail(w, err)
		return
	}
	for _, c := range []struct {
		field string
		v     int64
	}{{"capacity", b.Capacity}, {"refill", b.Refill}} {
		if err := checkRange(c.field, c.v, 1, maxSimQuota); err != nil {
			httpx.Fail(w, err)
			return
		}
	}
	period, err := simPeriod("per_ms", b.PerMs)
	if err != nil {
		httpx.Fail(w, err)
		return
	}
	sm.simulate(w, r, b, tokenlimit.TokenBucketLimit(b.Capacity, b.Refill, period), func(s *session) *simState { return &s.bucket })
}

func checkRange(field string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return httpx.BadRequest(field, "want %d to %d, got %d", lo, hi, v)
	}
	return nil
}

func simPeriod(field string, ms int64) (time.Duration, error) {
	if err := checkRange(field, ms, minSimPeriod.Milliseconds(), maxSimPeriod.Milliseconds()); err != nil {
		return 0, err
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// simulate runs b's action on the simulator pick selects, under lim, in the
// session's sandbox. A change of parameters starts the simulator afresh.
func (sm *Simulators) simulate(w http.ResponseWriter, r *http.Request, b simBody, lim tokenlimit.Limit, pick func(*session) *simState) {
	if err := checkRange("cost", b.Cost, 0, maxSimQuota); err != nil {
		httpx.Fail(w, err)
		return
	}
	if len(b.Kind) > 32 {
		httpx.Fail(w, httpx.BadRequest("kind", "at most 32 bytes, got %d", len(b.Kind)))
		return
	}
	if err := lim.Validate(); err != nil {
		httpx.Fail(w, httpx.BadRequest("limit", "%v", err))
		return
	}
	s, err := sm.sandbox.session(b.Session)
	if err != nil {
		httpx.Fail(w, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ans, err := s.run(r.Context(), pick(s), lim, b)
	if err != nil {
		httpx.Fail(w, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, ans)
}

// simKey is the budget's key in a session's store; each simulator uses
// another algorithm, so they never share a budget.
const simKey = "sim"

// run applies b to st. The caller holds s.mu.
func (s *session) run(ctx context.Context, st *simState, lim tokenlimit.Limit, b simBody) (simAnswer, error) {
	if st.limit != lim || b.Action == "reset" {
		if err := s.store.Reset(ctx, simKey, lim.Algorithm); err != nil {
			return simAnswer{}, err
		}
		*st = simState{limit: lim}
	}
	ans := simAnswer{Session: s.id, Policy: lim.String()}
	switch b.Action {
	case "send":
		d, err := s.limiter.Check(ctx, tokenlimit.Item{Key: simKey, Limit: lim, Cost: b.Cost})
		if err != nil {
			return simAnswer{}, err
		}
		st.n++
		e := newEntry(st.n, d.At, b, d.Results[0])
		st.log = append(st.log, e)
		if len(st.log) > maxLog {
			st.log = st.log[len(st.log)-maxLog:]
		}
		ans.Last = &e
	case "peek", "reset":
	default:
		return simAnswer{}, httpx.BadRequest("action", `want "send", "peek" or "reset", got %q`, b.Action)
	}
	return s.peek(ctx, st, lim, ans)
}

func newEntry(n int, at time.Time, b simBody, r tokenlimit.Result) entry {
	return entry{
		N: n, AtMs: at.UnixMilli(), Kind: b.Kind, Cost: b.Cost, Allowed: r.Allowed,
		Remaining: r.Remaining, RetryAfterMs: httpx.Millis(r.RetryAfter), CostExceedsLimit: r.CostExceedsLimit,
	}
}

// peek completes ans with the budget's state now, read with a cost-0
// check.
func (s *session) peek(ctx context.Context, st *simState, lim tokenlimit.Limit, ans simAnswer) (simAnswer, error) {
	d, err := s.limiter.Check(ctx, tokenlimit.Item{Key: simKey, Limit: lim})
	if err != nil {
		return simAnswer{}, err
	}
	res := d.Results[0]
	ans.NowMs, ans.Limit, ans.Remaining, ans.ResetAfterMs = d.At.UnixMilli(), res.Limit, res.Remaining, httpx.Millis(res.ResetAfter)
	if level, ok := BucketLevel(lim, res); ok {
		ans.Level = &level
	}
	ans.Log = append([]entry{}, st.log...)
	return ans, nil
}
