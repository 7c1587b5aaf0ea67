package httpx

import (
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// Decision is the JSON answer to a check or a reservation, the body of the
// API's 200, 429 and 503 answers and of the middleware's 429.
type Decision struct {
	Allowed       bool   `json:"allowed"`
	Unavailable   bool   `json:"unavailable,omitempty"`
	KeySpaceFull  bool   `json:"key_space_full,omitempty"`
	ReservationID string `json:"reservation_id,omitempty"`
	// WaitedMS is how long the request waited under a limit's wait before
	// this answer, in milliseconds rounded up; absent if it did not.
	WaitedMS int64     `json:"waited_ms,omitempty"`
	Limits   []Outcome `json:"limits"`
	Error    *Error    `json:"error,omitempty"`
}

// Outcome is one limit's answer. Times are milliseconds, rounded up.
// Level, LevelName and Unit are the service's (service.Outcome): empty
// for the middleware, which has no levels.
type Outcome struct {
	Name             string `json:"name"`
	Level            string `json:"level,omitempty"`
	LevelName        string `json:"level_name,omitempty"`
	Unit             string `json:"unit,omitempty"`
	Key              string `json:"key"`
	Request          int    `json:"request"`
	Shadow           bool   `json:"shadow"`
	FailOpen         bool   `json:"fail_open"`
	Allowed          bool   `json:"allowed"`
	Limit            int64  `json:"limit"`
	Remaining        int64  `json:"remaining"`
	Cost             int64  `json:"cost"`
	ResetMs          int64  `json:"reset_ms"`
	RetryAfterMs     int64  `json:"retry_after_ms"`
	CostExceedsLimit bool   `json:"cost_exceeds_limit,omitempty"`
}

// OutcomeOf fills an Outcome's fields from the engine's result r; the
// caller sets the name, key, request index, cost, and the shadow and
// fail-open marks.
func OutcomeOf(r tokenlimit.Result) Outcome {
	return Outcome{
		Allowed: r.Allowed, Limit: r.Limit, Remaining: r.Remaining,
		ResetMs: Millis(r.ResetAfter), RetryAfterMs: Millis(r.RetryAfter),
		CostExceedsLimit: r.CostExceedsLimit,
	}
}

// Millis is d in milliseconds rounded up, 0 for d <= 0: a client that
// waits that long is never early.
func Millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
