package algo

// Pair is a sliding counter's state: the start of the current epoch-aligned
// window and the cost charged in it and in the window before. The zero value
// is empty.
type Pair struct {
	Start int64
	Cur   int64
	Prev  int64
}

// maxSlidingCount caps a sliding counter's counts (tokenlimit's
// MaxSlidingCounterQuota) so that Prev × ppm stays below 2^53.
const maxSlidingCount = 1 << 33

// ppm is the resolution of the previous window's weight: parts per million.
const ppm = 1_000_000

// Sliding decides cost at now with the sliding window counter: the estimate
// of the cost in the last Length microseconds is
//
//	Cur + ceil(Prev × weight)
//
// where weight is the share of the previous window that the sliding window
// still covers, rounded up to whole milliseconds and then to parts per
// million, so the estimate never falls below the exact two-window value.
// It returns the state after charging, which the caller stores only when
// allowed and cost > 0.
//
// Example: Window{Limit: 10, Length: 10e6}, Prev 8, Cur 2, 2.5 s into the
// current window: weight 0.75, estimate 2+6 = 8, so cost 2 fits and cost 3
// waits until the estimate drops to 7: when weight <= 5/8, at 3.75 s.
func (w Window) Sliding(s Pair, now, cost int64) (Pair, Outcome) {
	s = w.shift(s, now)
	est := s.Cur + w.prevShare(s.Prev, now-s.Start)
	out := Outcome{Remaining: max(0, w.Limit-est), ResetAfter: w.pairReset(s, now)}
	switch {
	case cost > w.Limit:
		out.TooLarge = true
	case cost == 0:
		out.Allowed = true
	case est+cost <= w.Limit:
		s.Cur += cost
		out.Allowed = true
		out.Remaining = w.Limit - est - cost
		out.ResetAfter = w.pairReset(s, now)
	default:
		out.RetryAfter = w.fitAt(s, w.Limit-cost) - now
	}
	return s, out
}

// SlidingAdjust applies delta to a sliding counter charged at chargedAt: a
// refund goes back to the window it was charged in while that window is the
// current or the previous one; an extra charge lands in the current window.
// The second result is how long to keep the state (0: delete it).
func (w Window) SlidingAdjust(s Pair, now, chargedAt, delta int64) (Pair, int64) {
	s = w.shift(s, now)
	charged := windowStart(chargedAt, w.Length, w.Offset, 0)
	switch {
	case delta > 0:
		s.Cur = min(s.Cur+delta, maxSlidingCount)
	case charged == s.Start:
		s.Cur = max(0, s.Cur+delta)
	case charged == s.Start-w.Length:
		s.Prev = max(0, s.Prev+delta)
	}
	return s, w.pairReset(s, now)
}

// shift moves the state to the window that holds now.
func (w Window) shift(s Pair, now int64) Pair {
	start := windowStart(now, w.Length, w.Offset, s.Start)
	switch start {
	case s.Start:
		return s
	case s.Start + w.Length:
		return Pair{Start: start, Prev: s.Cur}
	default:
		return Pair{Start: start}
	}
}

// prevShare is ceil(prev × weight) at elapsed microseconds into the window.
func (w Window) prevShare(prev, elapsed int64) int64 {
	if prev == 0 {
		return 0
	}
	return ceilDiv(prev*w.weight(elapsed), ppm)
}

// weight is the share of the previous window still inside the sliding
// window, in parts per million, rounded up: 1..ppm.
func (w Window) weight(elapsed int64) int64 {
	lengthMs := w.Length / 1000
	leftMs := lengthMs - max(0, elapsed)/1000
	return ceilDiv(leftMs*ppm, lengthMs)
}

// fitAt returns the earliest time at which the estimate is at most budget,
// assuming nothing more is charged. budget >= 0.
func (w Window) fitAt(s Pair, budget int64) int64 {
	for range 3 {
		if at, ok := w.fitWithin(s, budget); ok {
			return at
		}
		s = Pair{Start: s.Start + w.Length, Prev: s.Cur}
	}
	return s.Start // unreachable: two empty windows always fit
}

// fitWithin finds the earliest time inside s's window at which
// Cur + ceil(Prev × weight) <= budget.
func (w Window) fitWithin(s Pair, budget int64) (int64, bool) {
	if s.Cur > budget {
		return 0, false
	}
	if s.Prev == 0 {
		return s.Start, true
	}
	maxWeight := (budget - s.Cur) * ppm / s.Prev
	if maxWeight >= ppm {
		return s.Start, true
	}
	lengthMs := w.Length / 1000
	maxLeftMs := maxWeight * lengthMs / ppm
	if maxLeftMs < 1 {
		return 0, false
	}
	return s.Start + (lengthMs-maxLeftMs)*1000, true
}

// pairReset is how long until the estimate is zero.
func (w Window) pairReset(s Pair, now int64) int64 {
	switch {
	case s.Cur > 0:
		return s.Start + 2*w.Length - now
	case s.Prev > 0:
		return s.Start + w.Length - now
	}
	return 0
}
