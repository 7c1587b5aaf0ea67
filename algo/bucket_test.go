package algo

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// ratCeil returns ceil(x) for a rational x.
func ratCeil(x *big.Rat) int64 {
	q, m := new(big.Int).DivMod(x.Num(), x.Denom(), new(big.Int)) // Euclidean: m >= 0
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		panic(fmt.Sprintf("ratCeil(%v) overflows int64", x))
	}
	return q.Int64()
}

func rat(a int64) *big.Rat { return new(big.Rat).SetInt64(a) }

func ratMax(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

// bucketModel is continuous GCRA with exact rationals: one unit refills every
// t microseconds, and the bucket is described by its theoretical arrival time
// tat. It shares no code with Bucket.
type bucketModel struct {
	capacity int64
	t        *big.Rat // µs per unit
	tat      *big.Rat // µs since the epoch
}

func (m *bucketModel) units(n int64) *big.Rat { return new(big.Rat).Mul(rat(n), m.t) }

// remaining is capacity − ceil(debt/t), clamped to 0..capacity.
func (m *bucketModel) remaining(debt *big.Rat) int64 {
	used := ratCeil(new(big.Rat).Quo(debt, m.t))
	return min(m.capacity, max(0, m.capacity-used))
}

func (m *bucketModel) check(now, cost int64) Outcome {
	n := rat(now)
	tat := ratMax(m.tat, n)
	debt := new(big.Rat).Sub(tat, n)
	out := Outcome{Remaining: m.remaining(debt), ResetAfter: ratCeil(debt)}
	if cost > m.capacity {
		out.TooLarge = true
		return out
	}
	if cost == 0 {
		out.Allowed = true
		return out
	}
	next := new(big.Rat).Add(tat, m.units(cost))
	nextDebt := new(big.Rat).Sub(next, n)
	excess := new(big.Rat).Sub(nextDebt, m.units(m.capacity))
	if excess.Sign() > 0 {
		out.RetryAfter = ratCeil(excess)
		return out
	}
	m.tat = next
	return Outcome{Allowed: true, Remaining: m.remaining(nextDebt), ResetAfter: ratCeil(nextDebt)}
}

func (m *bucketModel) adjust(now, delta int64) int64 {
	n := rat(now)
	tat := ratMax(m.tat, n)
	tat = new(big.Rat).Add(tat, m.units(delta))
	m.tat = ratMax(tat, n)
	// Extra charges are capped MaxDebt µs past now.
	if limit := rat(now + MaxDebt); m.tat.Cmp(limit) > 0 {
		m.tat = limit
	}
	return ratCeil(new(big.Rat).Sub(m.tat, n))
}

// tatRat is the exact value of a TAT in a bucket with denominator den.
func tatRat(s TAT, den int64) *big.Rat {
	return new(big.Rat).Add(rat(s.Tat), big.NewRat(s.Frac, den))
}

// awkwardRates are refill rates whose intervals are not whole microseconds
// or whose periods are long: quota per period.
var awkwardRates = []struct {
	quota  int64
	period time.Duration
}{
	{3, time.Second}, {7, time.Minute}, {90000, time.Minute}, {2, time.Second}, {10000, time.Minute},
	{1, time.Millisecond}, {999_999, time.Millisecond}, {1_000_000, 24 * time.Hour}, {1, 24 * time.Hour},
	{13, 7 * time.Millisecond}, {1_000_000, time.Second}, {6, time.Hour}, {1, time.Second},
}

// randomBucketLimit returns a valid token bucket limit: quota 1..1e6 per
// 1 ms..1 day, with a capacity anywhere up to Limit.Validate's bounds.
func randomBucketLimit(rng *rand.Rand) tokenlimit.Limit {
	var l tokenlimit.Limit
	if rng.IntN(3) == 0 {
		r := awkwardRates[rng.IntN(len(awkwardRates))]
		l = tokenlimit.TokenBucketLimit(0, r.quota, r.period)
	} else {
		l = tokenlimit.TokenBucketLimit(0, 1+rng.Int64N(1_000_000), time.Duration(1+rng.Int64N(86_400_000))*time.Millisecond)
	}
	num, _ := l.Interval()
	maxCap := min(int64(tokenlimit.MaxQuota), storekit.MaxBucketSpan/num)
	switch rng.IntN(5) {
	case 0:
		l.Burst = 1 + rng.Int64N(min(maxCap, 3))
	case 1:
		l.Burst = 1 + rng.Int64N(min(maxCap, 20))
	case 2:
		l.Burst = 1 + rng.Int64N(min(maxCap, 100_000))
	case 3:
		l.Burst = 1 + rng.Int64N(maxCap)
	default:
		l.Burst = maxCap - rng.Int64N(min(maxCap, 3))
	}
	return l
}

// randomCost returns 0..capacity and sometimes more, mostly small.
func randomCost(rng *rand.Rand, capacity int64) int64 {
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1, 2, 3:
		return min(capacity, 1)
	case 4:
		return capacity
	case 5:
		return capacity + 1 + rng.Int64N(3)
	case 6:
		return 1 + rng.Int64N(capacity)
	default:
		return 1 + rng.Int64N(min(capacity, 5))
	}
}

// randomStep returns how far the clock moves, given the interval of one unit
// (ivl µs, rounded) and the capacity's span: mostly forward, by a little, by
// about an interval, or by the whole span; sometimes backwards.
func randomStep(rng *rand.Rand, ivl, span int64) int64 {
	switch rng.IntN(8) {
	case 0:
		return 0
	case 1:
		return 1 + rng.Int64N(1000)
	case 2, 3:
		return rng.Int64N(3*ivl + 1)
	case 4:
		return ivl
	case 5:
		return rng.Int64N(span + 1)
	case 6:
		return span + rng.Int64N(ivl+1)
	default:
		return -rng.Int64N(2*ivl + 1)
	}
}

// TestBucketMatchesRationalModel drives Bucket and the exact rational model
// with the same random rates, capacities and (dt, cost) sequences, checks and
// adjustments: every outcome and every state must be identical.
func TestBucketMatchesRationalModel(t *testing.T) {
	t.Parallel()
	sequences, steps := 600, 150
	if testing.Short() {
		sequences = 100
	}
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(20260101, uint64(seq)))
		l := randomBucketLimit(rng)
		if err := l.Validate(); err != nil {
			t.Fatalf("seq %d: generated an invalid limit %s: %v", seq, l, err)
		}
		num, den := l.Interval()
		b := Bucket{Capacity: l.Capacity(), Num: num, Den: den}
		m := &bucketModel{capacity: b.Capacity, t: big.NewRat(l.Period.Microseconds(), l.Quota), tat: rat(0)}
		ivl := max(1, num/den)
		span := min(b.Capacity*num/den, 1<<50)
		maxDelta := min(3*b.Capacity, storekit.MaxBucketSpan/num)

		var s TAT
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro() + rng.Int64N(1e12)
		for step := range steps {
			now = max(0, now+randomStep(rng, ivl, span))
			where := fmt.Sprintf("seq %d (%s, Bucket%+v) step %d at %d", seq, l, b, step, now)
			if rng.IntN(8) == 0 {
				delta := rng.Int64N(2*maxDelta+1) - maxDelta
				var keep int64
				s, keep = b.Adjust(s, now, delta)
				if want := m.adjust(now, delta); keep != want {
					t.Fatalf("%s: Adjust(%d) keeps %d µs, model %d", where, delta, keep, want)
				}
			} else {
				cost := randomCost(rng, b.Capacity)
				next, got := b.Check(s, now, cost)
				want := m.check(now, cost)
				if got != want {
					t.Fatalf("%s: Check(cost %d) = %+v, model %+v", where, cost, got, want)
				}
				if got.Allowed && cost > 0 {
					s = next
				}
			}
			if s.Frac < 0 || s.Frac >= den {
				t.Fatalf("%s: state %+v has Frac outside [0, %d)", where, s, den)
			}
			if got := tatRat(s, den); got.Cmp(m.tat) != 0 {
				t.Fatalf("%s: state %+v = %s µs, model TAT %s µs", where, s, got.RatString(), m.tat.RatString())
			}
		}
	}
}

// TestBucketDocExample is the worked example of Bucket.Check's comment.
func TestBucketDocExample(t *testing.T) {
	t.Parallel()
	b := Bucket{Capacity: 10, Num: 500000, Den: 1}
	var s TAT
	const now = 1_767_225_600_000_000
	for i, step := range []struct {
		cost      int64
		allowed   bool
		remaining int64
		retry     int64
	}{{1, true, 9, 0}, {3, true, 6, 0}, {3, true, 3, 0}, {3, true, 0, 0}, {3, false, 0, 1_500_000}} {
		next, out := b.Check(s, now, step.cost)
		if out.Allowed != step.allowed || out.Remaining != step.remaining || out.RetryAfter != step.retry {
			t.Fatalf("step %d: cost %d: %+v, want allowed=%v remaining %d retry %d", i, step.cost, out, step.allowed, step.remaining, step.retry)
		}
		if out.Allowed {
			s = next
		}
	}
}

// slidingModel is the sliding window counter from its definition: the cost
// charged into each epoch-aligned window, the newest window charged (a clock
// that steps back keeps counting there), and the estimate
// cur + ceil(prev × weight), where weight is the share of the previous
// window still covered, rounded up to whole ms and then to parts per million.
// RetryAfter and ResetAfter are found by searching the estimate over time.
type slidingModel struct {
	limit, length int64 // length in µs
	charged       map[int64]int64
	newest        int64 // start of the newest window charged; -1 before any
}

func (m *slidingModel) windowAt(t int64) int64 {
	return max(t-t%m.length, m.newest)
}

func (m *slidingModel) estimate(t int64) int64 {
	w := m.windowAt(t)
	cur, prev := m.charged[w], m.charged[w-m.length]
	elapsed := max(0, t-w)
	leftMs := up(m.length-elapsed, 1000)
	weightPPM := up(leftMs*1_000_000, m.length/1000)
	return cur + up(prev*weightPPM, 1_000_000)
}

// up is ceil(a/b) for a >= 0, b > 0, written apart from algo's ceilDiv.
func up(a, b int64) int64 {
	q := a / b
	if q*b != a {
		q++
	}
	return q
}

// earliest returns the first instant at or after now at which the estimate is
// at most budget; the estimate never rises without a charge, so a binary
// search finds it.
func (m *slidingModel) earliest(now, budget int64) int64 {
	lo, hi := now, max(now, m.newest+2*m.length) // by hi both windows are empty
	if m.estimate(lo) <= budget {
		return lo
	}
	for hi-lo > 1 { // estimate(lo) > budget >= estimate(hi)
		mid := lo + (hi-lo)/2
		if m.estimate(mid) <= budget {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

func (m *slidingModel) check(now, cost int64) Outcome {
	est := m.estimate(now)
	out := Outcome{Remaining: max(0, m.limit-est), ResetAfter: m.earliest(now, 0) - now}
	switch {
	case cost > m.limit:
		out.TooLarge = true
	case cost == 0:
		out.Allowed = true
	case est+cost <= m.limit:
		w := m.windowAt(now)
		m.charged[w] += cost
		m.newest = w
		out.Allowed = true
		out.Remaining = m.limit - est - cost
		out.ResetAfter = m.earliest(now, 0) - now
	default:
		out.RetryAfter = m.earliest(now, m.limit-cost) - now
	}
	return out
}

// TestSlidingMatchesModel drives Window.Sliding and slidingModel with the same
// random limits, windows and (dt, cost) sequences: every outcome must be
// identical.
func TestSlidingMatchesModel(t *testing.T) {
	t.Parallel()
	lengthsMs := []int64{1, 2, 3, 7, 999, 1000, 1001, 5000, 60_000, 86_400_000, 100 * 86_400_000}
	sequences, steps := 600, 150
	if testing.Short() {
		sequences = 100
	}
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(20260102, uint64(seq)))
		lengthMs := lengthsMs[rng.IntN(len(lengthsMs))]
		if rng.IntN(2) == 0 {
			lengthMs = 1 + rng.Int64N(10_000)
		}
		limit := 1 + rng.Int64N(20)
		switch rng.IntN(4) {
		case 0:
			limit = 1 + rng.Int64N(1_000_000)
		case 1:
			limit = tokenlimit.MaxSlidingCounterQuota - rng.Int64N(3)
		}
		l := tokenlimit.SlidingCounterLimit(limit, time.Duration(lengthMs)*time.Millisecond)
		if err := l.Validate(); err != nil {
			t.Fatalf("seq %d: generated an invalid limit %s: %v", seq, l, err)
		}
		w := Window{Limit: limit, Length: lengthMs * 1000}
		m := &slidingModel{limit: limit, length: w.Length, charged: map[int64]int64{}, newest: -1}

		var s Pair
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro() + rng.Int64N(1e12)
		for step := range steps {
			var dt int64
			switch rng.IntN(6) {
			case 0:
				dt = 0
			case 1:
				dt = rng.Int64N(2000)
			case 2, 3:
				dt = rng.Int64N(w.Length/4 + 1)
			case 4:
				dt = rng.Int64N(3*w.Length + 1)
			default:
				dt = -rng.Int64N(w.Length + 1)
			}
			now += dt
			cost := randomCost(rng, limit)
			if rng.IntN(3) == 0 {
				cost = rng.Int64N(limit/4 + 2)
			}
			next, got := w.Sliding(s, now, cost)
			want := m.check(now, cost)
			if got != want {
				t.Fatalf("seq %d (%s) step %d at %d (state %+v): Sliding(cost %d) = %+v, model %+v", seq, l, step, now, s, cost, got, want)
			}
			if got.Allowed && cost > 0 {
				s = next
			}
		}
	}
}

// TestBoundsMatchTokenlimit ties algo's caps to the limits tokenlimit
// validates, which redisstore's Lua repeats.
func TestBoundsMatchTokenlimit(t *testing.T) {
	t.Parallel()
	if MaxLogEntries != tokenlimit.MaxLogEntries {
		t.Errorf("algo.MaxLogEntries %d, tokenlimit.MaxLogEntries %d", MaxLogEntries, tokenlimit.MaxLogEntries)
	}
	if maxFixedCount != 2*tokenlimit.MaxQuota {
		t.Errorf("maxFixedCount %d, want twice MaxQuota: %d", int64(maxFixedCount), int64(2*tokenlimit.MaxQuota))
	}
	if maxSlidingCount != tokenlimit.MaxSlidingCounterQuota {
		t.Errorf("maxSlidingCount %d, want MaxSlidingCounterQuota %d", int64(maxSlidingCount), int64(tokenlimit.MaxSlidingCounterQuota))
	}
	if maxSlidingCount*ppm >= storekit.MaxExact {
		t.Errorf("maxSlidingCount × ppm = %d, not below 2^53", int64(maxSlidingCount*ppm))
	}
}
