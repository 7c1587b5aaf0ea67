package algo

// Window is the shape shared by the window algorithms: at most Limit cost per
// Length microseconds, in windows starting at Offset + k×Length (fixed
// window and sliding counter; 0 <= Offset < Length).
type Window struct {
	Limit  int64
	Length int64
	Offset int64
}

// maxFixedCount caps a fixed window's count, twice tokenlimit's MaxQuota, so
// that extra charges can never push it past 2^53.
const maxFixedCount = 1 << 41

// Counter is a fixed window's state: the window it counts (its start, in
// microseconds since the Unix epoch) and the cost charged in it. The zero
// value is an empty window.
type Counter struct {
	Start int64
	Count int64
}

// Fixed decides cost at now for a fixed window and returns the state after
// charging it, which the caller stores only when the outcome is allowed and
// cost > 0. Windows are aligned to the Unix epoch.
//
// Example: Window{Limit: 5, Length: 5e6} with 5 charged in the window that
// started 1s ago denies cost 1 with RetryAfter 4e6 (the next window).
func (w Window) Fixed(s Counter, now, cost int64) (Counter, Outcome) {
	s = w.current(s, now)
	end := s.Start + w.Length
	out := Outcome{Remaining: max(0, w.Limit-s.Count), ResetAfter: w.resetAt(s.Count, end, now)}
	switch {
	case cost > w.Limit:
		out.TooLarge = true
	case cost == 0:
		out.Allowed = true
	case s.Count+cost <= w.Limit:
		s.Count += cost
		out.Allowed = true
		out.Remaining = w.Limit - s.Count
		out.ResetAfter = w.resetAt(s.Count, end, now)
	default:
		out.RetryAfter = end - now
	}
	return s, out
}

// FixedAdjust applies delta (see tokenlimit.Adjustment) to a fixed window
// charged at chargedAt. A refund counts only if the charge's window is still
// the current one; an extra charge always lands in the current window. The
// second result is how long to keep the state (0: delete it).
func (w Window) FixedAdjust(s Counter, now, chargedAt, delta int64) (Counter, int64) {
	s = w.current(s, now)
	switch {
	case delta > 0:
		s.Count = min(s.Count+delta, maxFixedCount)
	case windowStart(chargedAt, w.Length, w.Offset, 0) == s.Start:
		s.Count = max(0, s.Count+delta)
	}
	return s, w.resetAt(s.Count, s.Start+w.Length, now)
}

// current returns the state of the window that holds now.
func (w Window) current(s Counter, now int64) Counter {
	start := windowStart(now, w.Length, w.Offset, s.Start)
	if start != s.Start {
		return Counter{Start: start}
	}
	return s
}

func (w Window) resetAt(count, end, now int64) int64 {
	if count == 0 {
		return 0
	}
	return end - now
}
