package web_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/web"
)

type simAnswer struct {
	Session      string
	NowMs        int64 `json:"now_ms"`
	Policy       string
	Limit        int64
	Remaining    int64
	ResetAfterMs int64 `json:"reset_after_ms"`
	Level        *float64
	Last         *logEntry
	Log          []logEntry
}

type logEntry struct {
	N                int
	AtMs             int64 `json:"at_ms"`
	Kind             string
	Cost             int64
	Allowed          bool
	Remaining        int64
	RetryAfterMs     int64 `json:"retry_after_ms"`
	CostExceedsLimit bool  `json:"cost_exceeds_limit"`
}

// sim posts body to a simulator, adding the session, and returns the
// answer.
func (e *env) sim(t *testing.T, path string, session *string, body string) simAnswer {
	t.Helper()
	var a simAnswer
	e.post(path, fmt.Sprintf(`{"session": %q, %s}`, *session, body)).json(t, http.StatusOK, &a)
	*session = a.Session
	return a
}

// Six requests in a 5 s window of 5: five allowed, the sixth denied until
// the first leaves the window.
func TestSimWindow(t *testing.T) {
	t.Parallel()
	c := testkit.NewClock(base)
	e := newEnv(t, c.Now, web.Options{}, false)
	var session string
	first := e.sim(t, "/ui/api/sim/window", &session, `"action": "peek"`)
	if session == "" || first.Limit != 5 || first.Remaining != 5 || len(first.Log) != 0 || first.Policy != "sliding_log 5/5s" {
		t.Fatalf("first peek %+v", first)
	}
	var last simAnswer
	for i := range 6 {
		last = e.sim(t, "/ui/api/sim/window", &session, `"action": "send", "limit": 5, "window_ms": 5000`)
		c.Advance(100 * time.Millisecond)
		if last.Last == nil || last.Last.N != i+1 || last.Last.Allowed != (i < 5) {
			t.Fatalf("send %d: %+v", i+1, last.Last)
		}
	}
	// The sixth came at 500 ms; the first leaves the window at 5 s.
	if d := last.Last; d.RetryAfterMs != 4500 || d.Remaining != 0 || last.Remaining != 0 || len(last.Log) != 6 {
		t.Errorf("the denial %+v, state %+v", d, last)
	}
	if last.Log[0].AtMs != base.UnixMilli() || last.Log[5].AtMs != base.Add(500*time.Millisecond).UnixMilli() {
		t.Errorf("log times %d..%d", last.Log[0].AtMs, last.Log[5].AtMs)
	}
	c.Advance(4400 * time.Millisecond) // 5 s after the first request
	if a := e.sim(t, "/ui/api/sim/window", &session, `"action": "peek", "limit": 5, "window_ms": 5000`); a.Remaining != 1 || a.Last != nil || len(a.Log) != 6 {
		t.Errorf("5 s later: remaining %d, %d entries", a.Remaining, len(a.Log))
	}
	// New parameters start afresh, and so does a reset.
	if a := e.sim(t, "/ui/api/sim/window", &session, `"action": "send", "limit": 2, "window_ms": 1000`); a.Remaining != 1 || len(a.Log) != 1 || a.Policy != "sliding_log 2/1s" {
		t.Errorf("new parameters: %+v", a)
	}
	if a := e.sim(t, "/ui/api/sim/window", &session, `"action": "reset", "limit": 2, "window_ms": 1000`); a.Remaining != 2 || len(a.Log) != 0 {
		t.Errorf("after reset: %+v", a)
	}
	// Another page has its own sandbox.
	var other string
	if a := e.sim(t, "/ui/api/sim/window", &other, `"action": "send"`); other == session || a.Remaining != 4 {
		t.Errorf("a second session: %q remaining %d", other, a.Remaining)
	}
	// An unknown session id is not adopted: the server makes a new one.
	forged := "0123456789abcdef0123456789abcdef"
	if a := e.sim(t, "/ui/api/sim/window", &forged, `"action": "peek"`); forged == "0123456789abcdef0123456789abcdef" || a.Remaining != 5 {
		t.Errorf("a forged id was adopted: %q", forged)
	}
}

// On a full bucket of 10 refilling 2 per second: Chat (1) and three Embeds
// (3) are allowed, 10 in all; the fourth Embed is denied for 1.5 s less
// what refilled meanwhile.
func TestSimBucket(t *testing.T) {
	t.Parallel()
	c := testkit.NewClock(base)
	e := newEnv(t, c.Now, web.Options{}, false)
	var session string
	a := e.sim(t, "/ui/api/sim/bucket", &session, `"action": "peek"`)
	if a.Level == nil || *a.Level != 10 || a.Limit != 10 || a.ResetAfterMs != 0 || a.Policy != "token_bucket 2/1s burst 10" {
		t.Fatalf("a fresh bucket: %+v", a)
	}
	params := `"capacity": 10, "refill": 2, "per_ms": 1000`
	sends := []struct {
		kind string
		cost int64
	}{{"Chat", 1}, {"Embed", 3}, {"Embed", 3}, {"Embed", 3}, {"Embed", 3}}
	for i, s := range sends {
		a = e.sim(t, "/ui/api/sim/bucket", &session, fmt.Sprintf(`"action": "send", "kind": %q, "cost": %d, %s`, s.kind, s.cost, params))
		if i < 4 {
			c.Advance(50 * time.Millisecond)
		}
		if a.Last.Allowed != (i < 4) || a.Last.Kind != s.kind || a.Last.Cost != s.cost {
			t.Fatalf("send %d: %+v", i+1, a.Last)
		}
	}
	// 200 ms after emptying it, the bucket holds 0.4 tokens: 2.6 to go at
	// 2 per second.
	if a.Last.RetryAfterMs != 1300 || *a.Level != 0.4 || a.Remaining != 0 || a.ResetAfterMs != 4800 {
		t.Errorf("the denial %+v, level %v, reset after %d", a.Last, *a.Level, a.ResetAfterMs)
	}
	c.Advance(1300 * time.Millisecond)
	if a = e.sim(t, "/ui/api/sim/bucket", &session, `"action": "send", "kind": "Embed", "cost": 3, `+params); !a.Last.Allowed || *a.Level != 0 {
		t.Errorf("after waiting the retry-after: %+v level %v", a.Last, *a.Level)
	}
	if a = e.sim(t, "/ui/api/sim/bucket", &session, `"action": "send", "kind": "Huge", "cost": 11, `+params); a.Last.Allowed || !a.Last.CostExceedsLimit || a.Last.RetryAfterMs != 0 {
		t.Errorf("a cost above the capacity: %+v", a.Last)
	}
}

func TestSimBadParameters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, web.Options{}, false)
	for _, c := range []struct{ path, body, field, message string }{
		{"/ui/api/sim/window", `{"action": "jump"}`, "action", `want "send", "peek" or "reset"`},
		{"/ui/api/sim/window", `{"limit": 1001}`, "limit", "want 1 to 1000"},
		{"/ui/api/sim/window", `{"window_ms": 50}`, "window_ms", "want 100 to 3600000"},
		{"/ui/api/sim/window", `{"limit": "5"}`, "limit", "want an integer, got string"},
		{"/ui/api/sim/bucket", `{"capacity": 0}`, "capacity", "want 1 to 10000"},
		{"/ui/api/sim/bucket", `{"refill": 10001}`, "refill", "want 1 to 10000"},
		{"/ui/api/sim/bucket", `{"per_ms": 3600001}`, "per_ms", "want 100 to 3600000"},
		{"/ui/api/sim/bucket", `{"cost": -1}`, "cost", "want 0 to 10000"},
		{"/ui/api/sim/bucket", `{"kind": "` + strings.Repeat("k", 33) + `"}`, "kind", "at most 32 bytes"},
		{"/ui/api/sim/bucket", `{"colour": 1}`, "colour", "unknown field"},
		{"/ui/api/sim/race", `{"requests": 0}`, "requests", "want 1 to 200"},
		{"/ui/api/sim/race", `{"limit": 201}`, "limit", "want 1 to 200"},
		{"/ui/api/sim/race", `{"in_flight": 101}`, "in_flight", "want 1 to 100"},
		{"/ui/api/sim/compare", `{"pattern": "chaos"}`, "pattern", `want "boundary", "steady" or "weighted"`},
		{"/ui/api/sim/compare", `{"limit": 101}`, "limit", "want 1 to 100"},
		{"/ui/api/sim/compare", `{"window_ms": 999}`, "window_ms", "want 1000 to 60000"},
	} {
		e.post(c.path, c.body).wantError(t, http.StatusBadRequest, c.field, c.message)
	}
}

type raceAnswer struct {
	Requests, InFlight int
	Limit              int64
	Naive, Atomic      struct {
		Admitted int
		Requests []struct {
			Replica string
			Wave    int
			Saw     int64
			Allowed bool
		}
	}
}

// Client-side GET then INCR over-admits whenever reads cross; the atomic
// check admits exactly the limit.
func TestSimRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, web.Options{}, false)
	for _, c := range []struct {
		requests, inFlight, limit int
		naive                     int
	}{
		// Waves of 8: the first reads 10 left and admits 8, the second reads
		// 2 left and admits all 8 too; the third reads 0.
		{20, 4, 10, 16},
		// Everything in flight at once: everyone reads 10 left.
		{20, 10, 10, 20},
		// One request per replica at a time: pairs read the same count, and
		// an odd limit lets one pair through on the last unit.
		{20, 1, 5, 6},
		{6, 3, 10, 6}, // fewer requests than the limit: no one is denied
	} {
		var a raceAnswer
		e.post("/ui/api/sim/race", fmt.Sprintf(`{"requests": %d, "in_flight": %d, "limit": %d}`, c.requests, c.inFlight, c.limit)).json(t, http.StatusOK, &a)
		if a.Naive.Admitted != c.naive || a.Atomic.Admitted != min(c.limit, c.requests) {
			t.Errorf("%+v: naive admitted %d, atomic %d", c, a.Naive.Admitted, a.Atomic.Admitted)
		}
		if len(a.Naive.Requests) != c.requests || a.Naive.Requests[0].Replica != "A" || a.Naive.Requests[1].Replica != "B" ||
			a.Naive.Requests[0].Saw != int64(c.limit) || a.Naive.Requests[0].Wave != 1 || a.Naive.Requests[c.requests-1].Wave != (c.requests+2*c.inFlight-1)/(2*c.inFlight) {
			t.Errorf("%+v: naive requests %+v", c, a.Naive.Requests)
		}
	}
}

type compareAnswer struct {
	Pattern    string
	DurationMs int64 `json:"duration_ms"`
	Requests   []struct{ TMs, Cost int64 }
	Algorithms []struct {
		Algorithm, Policy string
		Decisions         []struct{ Allowed bool }
		Samples           []struct{ TMs, Remaining int64 }
		AdmittedRequests  int64 `json:"admitted_requests"`
		AdmittedCost      int64 `json:"admitted_cost"`
		Denied            int64
		MaxInWindow       int64 `json:"max_in_window"`
	}
}

// The five algorithms on the same traffic, 10 per 10 s: the fixed window
// lets twice the limit through around a boundary, the sliding log never
// more than the limit in any window, a bucket its capacity plus what
// refills in a window.
func TestSimCompare(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, web.Options{}, false)
	// The most cost any algorithm may admit in one window.
	bound := map[string]int64{"fixed_window": 20, "sliding_log": 10, "sliding_counter": 10, "token_bucket": 20, "gcra": 20}
	// On bursts of 10 just before and just after a boundary.
	boundary := map[string]int64{"fixed_window": 20, "sliding_log": 10, "sliding_counter": 10, "token_bucket": 11, "gcra": 11}
	for _, pattern := range []string{"boundary", "steady", "weighted"} {
		var a compareAnswer
		e.post("/ui/api/sim/compare", fmt.Sprintf(`{"pattern": %q, "limit": 10, "window_ms": 10000}`, pattern)).json(t, http.StatusOK, &a)
		if a.Pattern != pattern || a.DurationMs != 30000 || len(a.Algorithms) != 5 {
			t.Fatalf("%s: %+v", pattern, a)
		}
		for _, run := range a.Algorithms {
			if len(run.Decisions) != len(a.Requests) || len(run.Samples) != 121 || run.AdmittedRequests+run.Denied != int64(len(a.Requests)) {
				t.Errorf("%s %s: %d decisions, %d samples for %d requests", pattern, run.Algorithm, len(run.Decisions), len(run.Samples), len(a.Requests))
			}
			if run.MaxInWindow > bound[run.Algorithm] || run.MaxInWindow < 10 {
				t.Errorf("%s %s: at most %d in a window, want 10 to %d", pattern, run.Algorithm, run.MaxInWindow, bound[run.Algorithm])
			}
			if pattern == "boundary" && run.MaxInWindow != boundary[run.Algorithm] {
				t.Errorf("boundary %s: at most %d in a window, want %d", run.Algorithm, run.MaxInWindow, boundary[run.Algorithm])
			}
		}
	}
}
