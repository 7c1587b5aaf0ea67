package storetest

import (
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// Cases returns every behaviour of every algorithm as data. Expected values
// are worked out by hand from the algorithms' definitions (docs/algorithms.md).
func Cases() []Case {
	var all []Case
	for _, group := range [][]Case{fixedWindowCases(), slidingLogCases(), slidingCounterCases(), bucketCases(), gcraCases(), commonCases(), multiCases(), reservationCases(), reservationRecordCases(), leaseCases()} {
		all = append(all, group...)
	}
	return all
}

var (
	fw5per5s = tokenlimit.FixedWindowLimit(5, 5*s)
	sl5per5s = tokenlimit.SlidingLogLimit(5, 5*s)
	// The classic teaching token bucket: capacity 10, 2 tokens/s.
	tb10at2 = tokenlimit.TokenBucketLimit(10, 2, s)
)

func fixedWindowCases() []Case {
	return []Case{{
		Name:  "fixed_window/five per window then deny until the window ends",
		Limit: fw5per5s,
		Steps: []Step{
			at(0, 1, Ok(4, 5*s)), at(1*s, 1, Ok(3, 4*s)), at(2*s, 1, Ok(2, 3*s)),
			at(3*s, 1, Ok(1, 2*s)), at(4*s, 1, Ok(0, 1*s)),
			at(4500*ms, 1, Deny(0, 500*ms, 500*ms)),
			at(5*s, 1, Ok(4, 5*s)),
		},
	}, {
		Name:  "fixed_window/double burst across a boundary",
		Limit: fw5per5s,
		Steps: []Step{
			at(4900*ms, 5, Ok(0, 100*ms)),
			at(5000*ms, 5, Ok(0, 5*s)), // 10 admitted within 100ms: the known flaw
		},
	}, {
		Name:  "fixed_window/weighted costs",
		Limit: tokenlimit.FixedWindowLimit(10, s),
		Steps: []Step{
			at(0, 3, Ok(7, s)), at(100*ms, 3, Ok(4, 900*ms)), at(200*ms, 3, Ok(1, 800*ms)),
			at(300*ms, 3, Deny(1, 700*ms, 700*ms)),
			at(300*ms, 1, Ok(0, 700*ms)),
		},
	}, {
		Name:  "fixed_window/offset windows: a day from 08:00 to 08:00",
		Limit: tokenlimit.Limit{Algorithm: tokenlimit.FixedWindow, Quota: 3, Period: 24 * time.Hour, Offset: 8 * time.Hour},
		Steps: []Step{
			at(7*time.Hour, 3, Ok(0, time.Hour)),
			at(7*time.Hour+59*time.Minute, 1, Deny(0, time.Minute, time.Minute)),
			at(8*time.Hour, 1, Ok(2, 24*time.Hour)),
		},
	}, {
		Name:  "fixed_window/clock stepping back stays in the newest window",
		Limit: fw5per5s,
		Steps: []Step{
			at(7*s, 5, Ok(0, 3*s)),
			at(3*s, 1, Deny(0, 7*s, 7*s)),
			at(3*s, 0, Ok(0, 7*s)),
		},
	}}
}

func slidingLogCases() []Case {
	return []Case{{
		Name:  "sliding_log/five in five seconds, the sixth waits for the oldest to leave",
		Limit: sl5per5s,
		Steps: []Step{
			at(0, 1, Ok(4, 5*s)), at(0, 1, Ok(3, 5*s)), at(0, 1, Ok(2, 5*s)),
			at(0, 1, Ok(1, 5*s)), at(0, 1, Ok(0, 5*s)),
			at(0, 1, Deny(0, 5*s, 5*s)),
			at(2*s, 1, Deny(0, 3*s, 3*s)),
			at(5*s, 1, Ok(4, 5*s)),
		},
	}, {
		Name:  "sliding_log/spread requests leave one by one",
		Limit: sl5per5s,
		Steps: []Step{
			at(0, 1, Ok(4, 5*s)), at(1*s, 1, Ok(3, 5*s)), at(2*s, 1, Ok(2, 5*s)),
			at(3*s, 1, Ok(1, 5*s)), at(4*s, 1, Ok(0, 5*s)),
			at(4500*ms, 1, Deny(0, 500*ms, 4500*ms)),
			at(5*s, 1, Ok(0, 5*s)),
		},
	}, {
		Name:  "sliding_log/no double burst across a boundary",
		Limit: sl5per5s,
		Steps: []Step{
			at(4900*ms, 5, Ok(0, 5*s)),
			at(5000*ms, 5, Deny(0, 4900*ms, 4900*ms)),
			at(9900*ms, 5, Ok(0, 5*s)),
		},
	}, {
		Name:  "sliding_log/weighted entries free their own cost",
		Limit: tokenlimit.SlidingLogLimit(10, 10*s),
		Steps: []Step{
			at(0, 2, Ok(8, 10*s)), at(1*s, 3, Ok(5, 10*s)), at(2*s, 5, Ok(0, 10*s)),
			// 4 more needs the entries at 0s (2) and 1s (3) gone: at 11s.
			at(3*s, 4, Deny(0, 8*s, 9*s)),
			at(10*s, 2, Ok(0, 10*s)), // the entry at 0s left, 3+5+2 = 10
			at(11*s, 3, Ok(0, 10*s)),
		},
	}, {
		Name:  "sliding_log/clock stepping back keeps newer entries",
		Limit: sl5per5s,
		Steps: []Step{
			at(7*s, 5, Ok(0, 5*s)),
			at(3*s, 1, Deny(0, 9*s, 9*s)),
		},
	}}
}

func slidingCounterCases() []Case {
	l := tokenlimit.SlidingCounterLimit(10, 10*s)
	return []Case{{
		Name:  "sliding_counter/previous window weighted by its overlap",
		Limit: l,
		Steps: []Step{
			at(5*s, 8, Ok(2, 15*s)),
			// 2.5s into the next window: 8 × 0.75 = 6 counted.
			at(12500*ms, 2, Ok(2, 17500*ms)),
			// 3 more needs 8 × weight <= 5: weight 0.625, at 13.75s.
			at(12500*ms, 3, Deny(2, 1250*ms, 17500*ms)),
			at(13750*ms, 3, Ok(0, 16250*ms)),
		},
	}, {
		Name:  "sliding_counter/a full current window waits for the next one",
		Limit: l,
		Steps: []Step{
			at(2*s, 10, Ok(0, 18*s)),
			// At 10s the 10 become the previous window at weight 1: 1 more
			// fits once 10 × weight <= 9, at 11s.
			at(3*s, 1, Deny(0, 8*s, 17*s)),
			at(11*s, 1, Ok(0, 19*s)),
		},
	}, {
		Name:  "sliding_counter/windows older than the previous are forgotten",
		Limit: l,
		Steps: []Step{
			at(5*s, 10, Ok(0, 15*s)),
			at(35*s, 4, Ok(6, 15*s)),
		},
	}, {
		Name:  "sliding_counter/clock stepping back counts the previous window whole",
		Limit: l,
		Steps: []Step{
			at(12*s, 10, Ok(0, 18*s)),
			// Back to 5s: still the window at 10s. 1 more fits when the
			// 10 weigh <= 9 in the window at 20s: at 21s.
			at(5*s, 1, Deny(0, 16*s, 25*s)),
		},
	}, {
		Name:  "sliding_counter/offset windows",
		Limit: tokenlimit.Limit{Algorithm: tokenlimit.SlidingCounter, Quota: 10, Period: 10 * s, Offset: 5 * s},
		Steps: []Step{
			// The window is [5s, 15s); at 17.5s the previous one weighs 0.75.
			at(10*s, 8, Ok(2, 15*s)),
			at(17500*ms, 2, Ok(2, 17500*ms)),
		},
	}}
}

func bucketCases() []Case {
	return []Case{{
		Name:  "token_bucket/chat, embed, embed, embed, then refill at 2 per second",
		Limit: tb10at2,
		Steps: []Step{
			at(0, 1, Ok(9, 500*ms)),
			at(0, 3, Ok(6, 2*s)),
			at(0, 3, Ok(3, 3500*ms)),
			at(0, 3, Ok(0, 5*s)),
			at(0, 3, Deny(0, 1500*ms, 5*s)),
			at(0, 1, Deny(0, 500*ms, 5*s)),
			at(1*s, 3, Deny(2, 500*ms, 4*s)),
			at(1500*ms, 3, Ok(0, 5*s)),
			at(6500*ms, 0, Ok(10, 0)),
		},
	}, {
		Name:  "token_bucket/a third of a second per token stays exact",
		Limit: tokenlimit.TokenBucketLimit(3, 3, s),
		Steps: []Step{
			at(0, 3, Ok(0, s)),
			// Tokens come back at 1/3 s, 2/3 s and 1 s: the first is due
			// at 333333.3…µs, so 333333µs is 1µs too early.
			at(0, 1, Deny(0, 333334*us, s)),
			at(333333*us, 1, Deny(0, 1*us, 666667*us)),
			at(333334*us, 1, Ok(0, s)),
			at(3*s, 3, Ok(0, s)), // no fraction of a token was lost or gained
		},
	}, {
		Name:  "token_bucket/clock stepping back creates no tokens and no negative waits",
		Limit: tb10at2,
		Steps: []Step{
			at(10*s, 10, Ok(0, 5*s)),
			at(5*s, 1, Deny(0, 5500*ms, 10*s)),
			at(5*s, 0, Ok(0, 10*s)),
			at(10*s, 0, Ok(0, 5*s)),
			at(15*s, 0, Ok(10, 0)),
		},
	}, {
		// The largest bucket Validate accepts over the longest period: every
		// intermediate value is near 2^53, where Lua stops being exact.
		Name:  "token_bucket/at the precision bound",
		Limit: tokenlimit.TokenBucketLimit(storekit.MaxBucketSpan/tokenlimit.MaxPeriod.Microseconds(), 1, tokenlimit.MaxPeriod),
		Steps: []Step{
			at(1*us, 71, Ok(0, 71*tokenlimit.MaxPeriod)),
			at(1*us, 71, Deny(0, 71*tokenlimit.MaxPeriod, 71*tokenlimit.MaxPeriod)),
			at(tokenlimit.MaxPeriod+1*us, 1, Ok(0, 71*tokenlimit.MaxPeriod-tokenlimit.MaxPeriod+tokenlimit.MaxPeriod)),
		},
	}, {
		Name:  "token_bucket/large forward jump refills to capacity only",
		Limit: tb10at2,
		Steps: []Step{
			at(0, 10, Ok(0, 5*s)),
			at(400*24*time.Hour, 0, Ok(10, 0)),
			at(400*24*time.Hour, 10, Ok(0, 5*s)),
			at(400*24*time.Hour, 1, Deny(0, 500*ms, 5*s)),
		},
	}}
}

func gcraCases() []Case {
	// CL.THROTTLE key 10 5 60: bursts of 11, one every 12s.
	l := tokenlimit.GCRALimit(10, 5, time.Minute)
	steps := []Step{at(0, 1, Ok(10, 12*s))}
	for i := int64(1); i <= 10; i++ {
		steps = append(steps, at(0, 1, Ok(10-i, time.Duration(i+1)*12*s)))
	}
	steps = append(steps,
		at(0, 1, Deny(0, 12*s, 132*s)),
		at(12*s, 1, Ok(0, 132*s)),
		at(30*s, 3, Deny(1, 18*s, 114*s)),
		at(60*s, 2, Ok(2, 108*s)),
	)
	return []Case{{
		Name:  "gcra/CL.THROTTLE key 10 5 60",
		Limit: l,
		Steps: steps,
	}, {
		Name:  "gcra/redis-cell README: CL.THROTTLE user123 15 30 60 1",
		Limit: tokenlimit.GCRALimit(15, 30, time.Minute),
		Steps: []Step{at(0, 1, Ok(15, 2*s))},
	}}
}

// commonCases holds behaviours every algorithm shares; each is expanded per
// algorithm with the same steps.
func commonCases() []Case {
	limits := []tokenlimit.Limit{
		tokenlimit.FixedWindowLimit(10, 10*s),
		tokenlimit.SlidingLogLimit(10, 10*s),
		tokenlimit.SlidingCounterLimit(10, 10*s),
		tokenlimit.TokenBucketLimit(10, 1, s),
		tokenlimit.GCRALimit(9, 1, s),
	}
	// reset10 is the ResetAfter of a budget that took 10 at 0, seen at 0:
	// the window's end (fixed), the entry leaving (log), the charged window
	// leaving the previous slot (counter), 10 tokens at 1/s (buckets).
	reset10 := map[tokenlimit.Algorithm]time.Duration{
		tokenlimit.FixedWindow: 10 * s, tokenlimit.SlidingLog: 10 * s, tokenlimit.SlidingCounter: 20 * s,
		tokenlimit.TokenBucket: 10 * s, tokenlimit.GCRA: 10 * s,
	}
	// reset3 is the ResetAfter of a budget that took 3 at 0, seen at 0.
	reset3 := map[tokenlimit.Algorithm]time.Duration{
		tokenlimit.FixedWindow: 10 * s, tokenlimit.SlidingLog: 10 * s, tokenlimit.SlidingCounter: 20 * s,
		tokenlimit.TokenBucket: 3 * s, tokenlimit.GCRA: 3 * s,
	}
	// firstRetry is the RetryAfter of cost 1 on a budget that took 10 at 0.
	firstRetry := map[tokenlimit.Algorithm]time.Duration{
		tokenlimit.FixedWindow: 10 * s, tokenlimit.SlidingLog: 10 * s, tokenlimit.SlidingCounter: 11 * s,
		tokenlimit.TokenBucket: s, tokenlimit.GCRA: s,
	}
	var cases []Case
	for _, l := range limits {
		name := l.Algorithm.String()
		r := reset10[l.Algorithm]
		cases = append(cases, Case{
			Name:  name + "/cost 0 peeks without charging",
			Limit: l,
			Steps: []Step{
				at(0, 0, Ok(10, 0)),
				at(0, 10, Ok(0, r)),
				at(0, 0, Ok(0, r)),
				at(0, 0, Ok(0, r)),
			},
		}, Case{
			Name:  name + "/cost above capacity is never admitted and charges nothing",
			Limit: l,
			Steps: []Step{
				at(0, 11, TooLarge(10, 0)),
				at(0, 10, Ok(0, r)),
				at(0, 11, TooLarge(0, r)),
			},
		}, Case{
			Name:  name + "/keys are independent",
			Limit: l,
			Steps: []Step{
				atKey(0, "a", 10, Ok(0, r)),
				atKey(0, "b", 10, Ok(0, r)),
				atKey(0, "b", 0, Ok(0, r)),
				atKey(0, "c", 0, Ok(10, 0)),
				// Keys that look alike to Redis Cluster's hash tags are
				// still different budgets.
				atKey(0, "{a}", 0, Ok(10, 0)),
				atKey(0, "{a}:sum", 10, Ok(0, r)),
				atKey(0, "a:sum", 0, Ok(10, 0)),
			},
		}, Case{
			Name:  name + "/a refund after the budget was lost never lifts it above capacity",
			Limit: l,
			Steps: []Step{
				reserve(0, "r", 3, Ok(7, reset3[l.Algorithm])),
				{At: 0, Reset: true},
				settle(0, "r", 0),
				at(0, 0, Ok(10, 0)),
				at(0, 10, Ok(0, r)),
				at(0, 1, Deny(0, firstRetry[l.Algorithm], r)),
			},
		}, Case{
			Name:  name + "/large forward jump forgets everything",
			Limit: l,
			Steps: []Step{
				at(0, 10, Ok(0, r)),
				at(3650*24*time.Hour, 0, Ok(10, 0)),
				at(3650*24*time.Hour, 10, Ok(0, r)),
			},
		})
	}
	return cases
}

func multiCases() []Case {
	sl := tokenlimit.SlidingLogLimit(5, 5*s)
	fw := tokenlimit.FixedWindowLimit(100, 24*time.Hour)
	check := func(d time.Duration, probes ...Probe) Step { return Step{At: d, Probes: probes} }
	return []Case{{
		Name: "multi/all or nothing: a denial anywhere charges nothing",
		Steps: []Step{
			check(0,
				Probe{Key: "u", Limit: tb10at2, Cost: 3, Want: Ok(7, 1500*ms)},
				Probe{Key: "u", Limit: sl, Cost: 3, Want: Ok(2, 5*s)},
				Probe{Key: "{u}:plan", Limit: fw, Cost: 3, Want: Ok(97, 24*time.Hour)}),
			// The bucket and the quota would admit 3 more, the log would not:
			// they report themselves allowed, with the uncharged state.
			check(1*s,
				Probe{Key: "u", Limit: tb10at2, Cost: 3, Want: Ok(9, 500*ms)},
				Probe{Key: "u", Limit: sl, Cost: 3, Want: Deny(2, 4*s, 4*s)},
				Probe{Key: "{u}:plan", Limit: fw, Cost: 3, Want: Ok(97, 24*time.Hour-s)}),
			// Nothing was charged: peeks show the state after the first check.
			check(1*s,
				Probe{Key: "u", Limit: tb10at2, Cost: 0, Want: Ok(9, 500*ms)},
				Probe{Key: "u", Limit: sl, Cost: 0, Want: Ok(2, 4*s)},
				Probe{Key: "{u}:plan", Limit: fw, Cost: 0, Want: Ok(97, 24*time.Hour-s)}),
		},
	}, {
		Name: "multi/a cost too large for one limit charges no other",
		Steps: []Step{
			check(0,
				Probe{Key: "u", Limit: tb10at2, Cost: 6, Want: Ok(10, 0)},
				Probe{Key: "u", Limit: sl, Cost: 6, Want: TooLarge(5, 0)}),
			check(0, Probe{Key: "u", Limit: tb10at2, Cost: 0, Want: Ok(10, 0)}),
		},
	}}
}

func reservationCases() []Case {
	ten := tokenlimit.SlidingLogLimit(10, 10*s)
	return []Case{{
		Name:  "reservation/token_bucket settled down refunds the difference",
		Limit: tb10at2,
		Steps: []Step{
			reserve(0, "r", 8, Ok(2, 4*s)),
			settle(0, "r", 3),
			at(0, 0, Ok(7, 1500*ms)),
			{At: 0, Settle: "r", Actual: 1, WantSettle: tokenlimit.AlreadySettled},
		},
	}, {
		Name:  "reservation/token_bucket settled up charges past the limit",
		Limit: tb10at2,
		Steps: []Step{
			reserve(0, "r", 10, Ok(0, 5*s)),
			settle(0, "r", 14),
			at(0, 0, Ok(0, 7*s)),
			at(0, 1, Deny(0, 2500*ms, 7*s)),
			at(2500*ms, 1, Ok(0, 5*s)),
		},
	}, {
		Name:  "reservation/refunds are capped at capacity",
		Limit: tb10at2,
		Steps: []Step{
			reserve(0, "r", 5, Ok(5, 2500*ms)),
			// 2s later 4 of the 5 have refilled; refunding 5 fills the bucket, no more.
			settle(2*s, "r", 0),
			at(2*s, 0, Ok(10, 0)),
			at(2*s, 10, Ok(0, 5*s)),
			at(2*s, 1, Deny(0, 500*ms, 5*s)),
		},
	}, {
		Name:  "reservation/sliding_log refund leaves with its charge",
		Limit: ten,
		Steps: []Step{
			reserve(1*s, "r", 4, Ok(6, 10*s)),
			settle(2*s, "r", 1),
			at(2*s, 0, Ok(9, 9*s)),
			at(3*s, 9, Ok(0, 10*s)),
			at(11*s, 0, Ok(1, 2*s)), // the charge and its refund left together
		},
	}, {
		Name:  "reservation/sliding_log refund after its charge left changes nothing",
		Limit: ten,
		Steps: []Step{
			reserve(0, "r", 4, Ok(6, 10*s)),
			at(5*s, 4, Ok(2, 10*s)),
			settle(10*s, "r", 0),
			at(10*s, 0, Ok(6, 5*s)),
		},
	}, {
		Name:  "reservation/sliding_log extra charge is recorded when settled",
		Limit: ten,
		Steps: []Step{
			reserve(0, "r", 2, Ok(8, 10*s)),
			settle(1*s, "r", 5),
			at(1*s, 0, Ok(5, 10*s)),
			at(10*s, 0, Ok(7, 1*s)),
			at(11*s, 0, Ok(10, 0)),
		},
	}, {
		Name:  "reservation/fixed_window refund does not reach into a later window",
		Limit: fw5per5s,
		Steps: []Step{
			reserve(1*s, "r", 4, Ok(1, 4*s)),
			at(5500*ms, 5, Ok(0, 4500*ms)),
			settle(6*s, "r", 0),
			at(6*s, 0, Ok(0, 4*s)),
		},
	}, {
		Name:  "reservation/fixed_window refund in the same window",
		Limit: fw5per5s,
		Steps: []Step{
			reserve(1*s, "r", 4, Ok(1, 4*s)),
			settle(2*s, "r", 1),
			at(2*s, 0, Ok(4, 3*s)),
			{At: 2 * s, Settle: "r", Actual: 0, WantSettle: tokenlimit.AlreadySettled},
			at(2*s, 0, Ok(4, 3*s)),
		},
	}, {
		Name:  "reservation/sliding_counter refund to the previous window",
		Limit: tokenlimit.SlidingCounterLimit(10, 10*s),
		Steps: []Step{
			reserve(5*s, "r", 8, Ok(2, 15*s)),
			settle(12500*ms, "r", 4),
			// the previous window now holds 4: 4 × 0.75 = 3 counted.
			at(12500*ms, 0, Ok(7, 7500*ms)),
		},
	}, {
		Name:  "reservation/cancel refunds everything",
		Limit: tokenlimit.GCRALimit(9, 1, s),
		Steps: []Step{
			reserve(0, "r", 7, Ok(3, 7*s)),
			settle(0, "r", 0),
			at(0, 0, Ok(10, 0)),
		},
	}}
}

// leaseCases are the store calls a lease makes (resilient.Policy.Lease,
// docs/algorithms.md): a take is a reservation of the lease's size, its
// return a settlement to what was used, from any replica, once.
func leaseCases() []Case {
	fw10per5s := tokenlimit.FixedWindowLimit(10, 5*s)
	return []Case{{
		Name:  "lease/fixed_window leases are charged whole and return only within their window",
		Limit: fw10per5s,
		Steps: []Step{
			reserve(1*s, "l1", 4, Ok(6, 4*s)),
			{At: 1 * s, Reserve: "l2", Other: true, Probes: []Probe{{Cost: 4, Want: Ok(2, 4*s)}}},
			// What the leases took is gone from the store until returned.
			at(2*s, 3, Deny(2, 3*s, 3*s)),
			settle(3*s, "l1", 1),
			at(3*s, 0, Ok(5, 2*s)),
			// l2 ends with its window: returning it in the next changes nothing.
			{At: 6 * s, Settle: "l2", Actual: 0, Other: true},
			at(6*s, 0, Ok(10, 0)),
		},
	}, {
		Name:  "lease/token_bucket unused part returned once, by another replica",
		Limit: tb10at2,
		Steps: []Step{
			reserve(0, "l", 6, Ok(4, 3*s)),
			// 4 used: 2 come back; by 1s two more refilled, 2 still missing.
			{At: 1 * s, Settle: "l", Actual: 4, Other: true},
			at(1*s, 0, Ok(8, 1*s)),
			{At: 1 * s, Settle: "l", Actual: 0, WantSettle: tokenlimit.AlreadySettled},
			at(1*s, 0, Ok(8, 1*s)),
		},
	}, {
		Name:  "lease/a lease used up returns nothing",
		Limit: tb10at2,
		Steps: []Step{
			reserve(0, "l", 5, Ok(5, 2500*ms)),
			settle(0, "l", 5),
			at(0, 0, Ok(5, 2500*ms)),
		},
	}, {
		Name:  "lease/a take larger than what is left is denied and charges nothing",
		Limit: tb10at2,
		Steps: []Step{
			at(0, 7, Ok(3, 3500*ms)),
			// The denial says what is left: the calls take it one by one.
			reserve(0, "l", 5, Deny(3, 1*s, 3500*ms)),
			at(0, 3, Ok(0, 5*s)),
		},
	}}
}
