package algo

// MaxDebt caps how far extra charges can push a bucket's TAT past now, in
// µs (2^51, about 71 years), so that times stay below 2^53.
const MaxDebt = 1 << 51

// Bucket is a token bucket, which is also GCRA: Capacity units at most, one
// unit refilling every Num/Den microseconds (a reduced fraction, so rates like
// 3 per second stay exact). Capacity × Num must stay below 2^53.
//
// A Bucket made by NewBucket carries its capacity's span precomputed; one
// written as a literal computes it per call, with the same results.
type Bucket struct {
	Capacity int64
	Num      int64
	Den      int64
	// spanQ + spanR/Den is the capacity's span, Capacity × Num/Den µs, the
	// debt of an empty bucket; both 0 when not precomputed (a real span is
	// never 0: Capacity × Num >= 1).
	spanQ, spanR int64
}

// NewBucket returns the bucket of capacity units refilling one every
// num/den µs, with its capacity's span precomputed.
func NewBucket(capacity, num, den int64) Bucket {
	b := Bucket{Capacity: capacity, Num: num, Den: den}
	b.spanQ, b.spanR = b.span()
	return b
}

// span is the capacity's span, Capacity × Num/Den µs, as a quotient and a
// remainder of Den.
func (b *Bucket) span() (q, r int64) {
	if b.spanQ != 0 || b.spanR != 0 {
		return b.spanQ, b.spanR
	}
	return b.Capacity * b.Num / b.Den, b.Capacity * b.Num % b.Den
}

// TAT is a bucket's state, the theoretical arrival time of GCRA: the instant
// at which the bucket will be full again, Tat + Frac/Den microseconds since
// the Unix epoch, with 0 <= Frac < Den. Any TAT not after now means a full
// bucket; the zero value is one.
//
// The debt D = TAT - now is what the bucket lacks, in time: it holds
// Capacity - ceil(D / interval) units, and a cost c fits while
// D + c×interval <= Capacity×interval.
type TAT struct {
	Tat  int64
	Frac int64
}

// Check decides cost at now and returns the state after charging it, which
// the caller stores only when allowed and cost > 0.
//
// Example: Bucket{Capacity: 10, Num: 500000, Den: 1} (2 per second) when
// full admits chat=1 then embed=3 three times (Remaining 9, 6, 3, 0) and
// denies a fourth embed with RetryAfter 1.5e6 µs.
func (b *Bucket) Check(s TAT, now, cost int64) (TAT, Outcome) {
	s = b.atLeast(s, now)
	spanQ, spanR := b.span()
	if cost > b.Capacity || cost == 0 {
		return s, Outcome{Allowed: cost == 0, TooLarge: cost != 0, Remaining: b.remaining(s, now, spanQ), ResetAfter: b.reset(s, now)}
	}
	next := b.add(s, cost)
	ahead := next.Tat - now - spanQ // > 0, or 0 with Frac > spanR: over capacity
	if ahead > 0 || (ahead == 0 && next.Frac > spanR) {
		out := Outcome{Remaining: b.remaining(s, now, spanQ), ResetAfter: b.reset(s, now), RetryAfter: ahead}
		if next.Frac > spanR {
			out.RetryAfter++
		}
		return s, out
	}
	return next, Outcome{Allowed: true, Remaining: b.remaining(next, now, spanQ), ResetAfter: b.reset(next, now)}
}

// Adjust applies delta at now: an extra charge moves the TAT later with no
// limit (the cost was incurred), a refund moves it earlier but never before
// now, so the bucket never holds more than Capacity. It returns the new state
// and how long to keep it (0: the bucket is full, delete it).
func (b *Bucket) Adjust(s TAT, now, delta int64) (TAT, int64) {
	s = b.atLeast(s, now)
	if delta >= 0 {
		s = b.add(s, delta)
		if s.Tat-now > MaxDebt {
			s = TAT{Tat: now + MaxDebt}
		}
		return s, b.reset(s, now)
	}
	back := -delta * b.Num
	s.Tat -= back / b.Den
	s.Frac -= back % b.Den
	if s.Frac < 0 {
		s.Frac += b.Den
		s.Tat--
	}
	s = b.atLeast(s, now)
	return s, b.reset(s, now)
}

// atLeast returns s, or now if the bucket is already full by then.
func (b *Bucket) atLeast(s TAT, now int64) TAT {
	if s.Tat < now {
		return TAT{Tat: now}
	}
	return s
}

// add moves s later by cost intervals, exactly.
func (b *Bucket) add(s TAT, cost int64) TAT {
	if b.Den == 1 { // a whole number of µs per unit: no fraction
		return TAT{Tat: s.Tat + cost*b.Num}
	}
	units := s.Frac + cost*b.Num
	return TAT{Tat: s.Tat + units/b.Den, Frac: units % b.Den}
}

// remaining is Capacity - ceil(D/interval), at least 0, for s at or after
// now. It avoids multiplying a large debt: beyond the capacity's span the
// answer is 0.
func (b *Bucket) remaining(s TAT, now, spanQ int64) int64 {
	ahead := s.Tat - now
	if ahead > spanQ+1 {
		return 0
	}
	debt := ahead*b.Den + s.Frac
	return max(0, b.Capacity-ceilDiv(debt, b.Num))
}

// reset is ceil(D) in microseconds, for s at or after now.
func (b *Bucket) reset(s TAT, now int64) int64 {
	if s.Frac > 0 {
		return s.Tat - now + 1
	}
	return s.Tat - now
}
