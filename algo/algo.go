// Package algo holds the five rate-limiting algorithms as pure functions of
// (state, now, cost) in integers: times and durations in microseconds, costs
// in whole units. It is the reference that the Redis store's Lua scripts
// match line for line, and what the in-memory store runs.
//
// Every function is deterministic and safe for concurrent use; none reads a
// clock. Inputs are assumed valid (see tokenlimit.Limit.Validate): positive
// limits and lengths, 0 <= cost <= tokenlimit.MaxCost, and magnitudes that
// keep every intermediate value below 2^53. Times are never before the
// Unix epoch.
package algo

// Outcome is an algorithm's answer for one cost at one instant.
type Outcome struct {
	// Allowed reports whether the cost fits; a cost of 0 always does (a peek).
	Allowed bool
	// TooLarge reports that the cost exceeds the capacity: never admissible.
	TooLarge bool
	// Remaining is the cost that would still fit now, after the charge if
	// allowed. Never negative.
	Remaining int64
	// RetryAfter is 0 when allowed or TooLarge; otherwise the microseconds
	// until the cost would fit if nothing else were charged. Never negative.
	RetryAfter int64
	// ResetAfter is the microseconds until the budget is whole again (after
	// the charge if allowed). It is also how long the state must be kept:
	// 0 means the state is empty and may be deleted.
	ResetAfter int64
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 {
	return (a + b - 1) / b
}

// windowStart returns the start of the length-long window that holds now
// (windows start at offset + k×length), but never earlier than floor: a clock
// that steps back stays in the newest window seen, so it cannot reopen an
// old window's budget. 0 <= offset < length <= now.
func windowStart(now, length, offset, floor int64) int64 {
	return max(now-(now-offset)%length, floor)
}
