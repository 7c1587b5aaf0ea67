package resilient_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/algo"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// This file checks the bounds of docs/algorithms.md ("Leases") against a
// model: random arrivals over several replicas sharing one store, each
// taking leases, at a fake clock, on memstore and on Redis.
//
//   - Over-admission: a fixed window admits at most its quota in each
//     window; a token bucket admits at most capacity + rate × t in the
//     first t, and in any interval [a, b] at most capacity +
//     rate × (b − a + TTL) plus what leases returned in [a − TTL, b].
//   - Under-admission: what the store holds that no call was admitted for
//     (held) is at most the replicas' outstanding leases, R × 2 × size; a
//     denied call would have been denied by the lease-free algorithm fed
//     the same admissions, had held been admitted too (the model's
//     remaining less the cost is below held).
//   - Leases end: once the calls stop, every lease is returned within its
//     TTL, and every leased unit is accounted for: admitted from a lease,
//     returned, or left standing.
//
// Each model runs twice: with checks alone, and with reservations settled
// in process (ReserveHeld) among them, each settled later to a random
// cost (0..6 for an estimate of 1..4: refunds and extra charges, into
// live leases, across their ends and on the store) or cancelled. Then an
// admission counts its estimate, a settlement's refund counts as given
// back (F, in the interval bound), and an extra charge is the algorithm's
// own over-admission: a fixed window admits at most its quota plus the
// extra charges made in the window, and a bucket's bounds hold for what
// was admitted less what was refunded. Once every reservation is settled
// and every lease returned, a fixed window's store counts exactly what
// was used.

// leaseReplicas is the number of replicas of the model.
const leaseReplicas = 4

// leaseRun is one run of the model: its replicas, the store they share,
// and what happened.
type leaseRun struct {
	t        *testing.T
	clock    *testkit.Clock
	store    tokenlimit.Store
	replicas []*resilient.Failover
	limit    tokenlimit.Limit
	policy   resilient.Policy
	start    time.Time

	mu       sync.Mutex
	events   map[resilient.LeaseEvent]int64
	refunds  []leaseAdmission // returns, at the clock's time
	admitted []leaseAdmission
	// fromLease is the cost admitted from leases (the rest was decided
	// on the store).
	fromLease int64
	// reserving: a share of the calls are reservations settled in
	// process, pending until they are settled.
	reserving bool
	pending   []leaseReservation
	seq       int
}

// leaseReservation is a reservation of the model, admitted at at.
type leaseReservation struct {
	h    *resilient.Held
	f    *resilient.Failover
	at   time.Time
	cost int64
}

type leaseAdmission struct {
	at   time.Time
	cost int64
}

func newLeaseRun(t *testing.T, store tokenlimit.Store, limit tokenlimit.Limit, lease tokenlimit.Lease) *leaseRun {
	t.Helper()
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	r := &leaseRun{t: t, clock: testkit.NewClock(start), store: store, limit: limit, start: start,
		policy: resilient.Policy{Limit: "model", Lease: lease}, events: map[resilient.LeaseEvent]int64{}}
	for range leaseReplicas {
		f, err := resilient.NewFailover(store, resilient.FailoverOptions{
			Options:   resilient.Options{Clock: r.clock.Now, Timeout: 10 * time.Second}, // never on a loaded machine
			Logger:    testkit.Quiet(),
			AfterFunc: r.clock.AfterFunc,
			Observer:  resilient.Observer{Lease: r.observe},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close(context.Background()) })
		r.replicas = append(r.replicas, f)
	}
	return r
}

func (r *leaseRun) observe(_ string, ev resilient.LeaseEvent, amount int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[ev] += amount
	if ev == resilient.LeaseReturned {
		r.refunds = append(r.refunds, leaseAdmission{at: r.clock.Now(), cost: amount})
	}
}

// idle waits until no replica has a take or return in flight.
func (r *leaseRun) idle() {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, f := range r.replicas {
		for !resilient.LeasesIdle(f) {
			if time.Now().After(deadline) {
				r.t.Fatal("leases still busy after 10s")
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// unused is what the replicas' leases can still admit.
func (r *leaseRun) unused() (n int64, outstanding int) {
	for _, f := range r.replicas {
		s := f.LeaseStats()["model"]
		if w := resilient.LeasesHeldWalked(f)["model"]; w.Outstanding != s.Outstanding || w.Leased != s.Leased || w.Unused != s.Unused {
			r.t.Fatalf("the lease totals kept hold %d leases of %d, %d unused; the holders %d of %d, %d unused",
				s.Outstanding, s.Leased, s.Unused, w.Outstanding, w.Leased, w.Unused)
		}
		n += s.Unused
		outstanding += s.Outstanding
	}
	return n, outstanding
}

// storeRemaining peeks at the budget on the store.
func (r *leaseRun) storeRemaining() int64 {
	res := make([]tokenlimit.Result, 1)
	if _, err := r.store.Check(context.Background(), r.clock.Now(), []tokenlimit.Item{{Key: "hot", Limit: r.limit}}, res); err != nil {
		r.t.Fatal(err)
	}
	return res[0].Remaining
}

// step decides one call of cost on replica i at the clock's time: a
// check, or a reservation settled in process when reserve is set.
func (r *leaseRun) step(i int, cost int64, reserve bool) (tokenlimit.Result, bool) {
	r.t.Helper()
	res := make([]tokenlimit.Result, 1)
	items, policies := []tokenlimit.Item{{Key: "hot", Limit: r.limit, Cost: cost}}, []resilient.Policy{r.policy}
	var a resilient.Answer
	var h *resilient.Held
	var err error
	if reserve {
		r.seq++
		req := tokenlimit.ReserveRequest{ID: fmt.Sprintf("r%d", r.seq), Items: items, TTL: time.Hour}
		h, a, err = r.replicas[i].ReserveHeld(context.Background(), req, policies, res)
	} else {
		a, err = r.replicas[i].Decide(context.Background(), items, policies, res)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	if a.Source != resilient.FromLease && a.Source != resilient.FromStore {
		r.t.Fatalf("answer %+v: want one from a lease or the store", a)
	}
	if a.Allowed {
		r.admitted = append(r.admitted, leaseAdmission{at: r.clock.Now(), cost: cost})
		if a.Source == resilient.FromLease {
			r.fromLease += cost
		}
		if reserve {
			r.pending = append(r.pending, leaseReservation{h: h, f: r.replicas[i], at: r.clock.Now(), cost: cost})
		}
	}
	r.idle()
	return res[0], a.Allowed
}

// settle settles the pending reservation k to a random cost 0..6, or
// cancels it, at the clock's time, and returns it and what it settled to.
func (r *leaseRun) settle(rng *rand.Rand, k int) (leaseReservation, int64) {
	r.t.Helper()
	p := r.pending[k]
	r.pending = slices.Delete(r.pending, k, k+1)
	req := tokenlimit.SettleRequest{ID: p.h.ID(), Actual: rng.Int64N(7), Cancel: rng.IntN(6) == 0}
	to := req.Actual
	if req.Cancel {
		to = 0
	}
	if st, err := p.f.SettleHeld(context.Background(), p.h, req); err != nil || st != tokenlimit.Settled {
		r.t.Fatalf("settle %s: %v, %v; want settled", p.h.ID(), st, err)
	}
	if refund := p.cost - to; refund > 0 {
		r.mu.Lock()
		r.refunds = append(r.refunds, leaseAdmission{at: r.clock.Now(), cost: refund})
		r.mu.Unlock()
	}
	r.idle()
	return p, to
}

// arrivals drives n random calls: bursts of close calls and pauses
// longer than a lease, costs 1..4, on random replicas; check runs after
// each with the call's cost and whether it was admitted. When the run
// reserves, 40% of the calls are reservations, and a step settles a
// pending one instead of calling with a chance of 30%; settled runs after
// each settlement with the reservation and what it was settled to, and
// the reservations still pending are settled at the end.
func (r *leaseRun) arrivals(rng *rand.Rand, n int, check func(cost int64, allowed bool), settled func(p leaseReservation, to int64)) {
	for range n {
		switch p := rng.IntN(100); {
		case p < 3:
			r.clock.Advance(time.Duration(rng.Int64N(int64(3 * r.policy.Lease.TTL))))
		case p < 60:
			r.clock.Advance(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
		default:
			r.clock.Advance(time.Duration(rng.Int64N(int64(r.policy.Lease.TTL / 4))))
		}
		r.idle() // the leases that ended meanwhile are returned first
		if len(r.pending) > 0 && rng.IntN(100) < 30 {
			settled(r.settle(rng, rng.IntN(len(r.pending))))
			continue
		}
		cost := 1 + rng.Int64N(4)
		_, allowed := r.step(rng.IntN(leaseReplicas), cost, r.reserving && rng.IntN(100) < 40)
		check(cost, allowed)
	}
	for len(r.pending) > 0 {
		settled(r.settle(rng, 0))
	}
}

// finish stops the calls, lets every lease end and checks that each was
// returned within its TTL and that every leased unit is accounted for.
func (r *leaseRun) finish() {
	r.t.Helper()
	r.clock.Advance(r.policy.Lease.TTL)
	r.idle()
	if _, n := r.unused(); n != 0 {
		r.t.Errorf("%d leases outstanding a TTL after the last call; want none", n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	taken, returned, stood := r.events[resilient.LeaseTaken], r.events[resilient.LeaseReturned], r.events[resilient.LeaseStood]
	// (Settlements move units between leases, admissions and the store:
	// a run with reservations is checked by the store's count instead.)
	if !r.reserving && taken != r.fromLease+returned+stood {
		r.t.Errorf("leased %d; admitted from leases %d + returned %d + stood %d = %d: every leased unit must be accounted for once",
			taken, r.fromLease, returned, stood, r.fromLease+returned+stood)
	}
	var sum resilient.LeaseStats
	for _, f := range r.replicas {
		s := f.LeaseStats()["model"]
		sum.Taken, sum.Returned, sum.Stood = sum.Taken+s.Taken, sum.Returned+s.Returned, sum.Stood+s.Stood
	}
	if sum.Taken*r.policy.Lease.Size != taken || sum.Returned != returned || sum.Stood != stood {
		r.t.Errorf("the replicas' lease totals %+v disagree with their observers: leased %d, returned %d, stood %d", sum, taken, returned, stood)
	}
	if taken == 0 || r.fromLease == 0 {
		r.t.Errorf("leased %d, admitted from leases %d: the run never exercised leases", taken, r.fromLease)
	}
	r.t.Logf("%d admitted (%d from leases), %d leased, %d returned, %d stood", len(r.admitted), r.fromLease, taken, returned, stood)
}

// leaseStore returns the store of a model run on store.
func leaseStore(t *testing.T, store string) tokenlimit.Store {
	if store == testkit.Memory {
		return testkit.MemStore(t)
	}
	return testkit.RedisStore(t, redistest.Start(t).Addr(), testkit.Rueidis)
}

// TestLeaseBoundsOfAFixedWindow runs the model on a fixed window, with
// checks alone and with reservations.
func TestLeaseBoundsOfAFixedWindow(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		for _, reserving := range []bool{false, true} {
			t.Run(map[bool]string{false: "checks", true: "reservations"}[reserving], func(t *testing.T) {
				leaseWindowModel(t, store, reserving)
			})
		}
	})
}

// leaseWindowModel runs the model on a fixed window on store.
func leaseWindowModel(t *testing.T, store string, reserving bool) {
	lease := tokenlimit.Lease{Size: 20, TTL: 2 * time.Second}
	limit := tokenlimit.FixedWindowLimit(100, 10*time.Second)
	r := newLeaseRun(t, leaseStore(t, store), limit, lease)
	r.reserving = reserving
	window := func(at time.Time) int64 { return at.UnixMicro() / limit.Period.Microseconds() }
	// used is what each window counts as used (admissions, less refunds
	// to the window charged, plus extra charges); extra the extra charges.
	used, extra := map[int64]int64{}, map[int64]int64{}
	// exact checks that the store counts what was used plus what the
	// leases hold unused, while it has some left (at 0 it may count more).
	exact := func() {
		now := r.clock.Now()
		unused, _ := r.unused()
		if left := r.storeRemaining(); left > 0 {
			if held := (limit.Quota - left) - used[window(now)]; held != unused || held > leaseReplicas*2*lease.Size {
				t.Fatalf("%s: the store holds %d that no call used, the leases %d unused; want the same, 0..%d", now, held, unused, leaseReplicas*2*lease.Size)
			}
		}
	}
	denials := 0
	r.arrivals(rand.New(rand.NewPCG(1, 23)), 3000, func(cost int64, allowed bool) {
		now := r.clock.Now()
		w := window(now)
		if allowed {
			used[w] += cost
		}
		if used[w] > limit.Quota+extra[w] {
			t.Fatalf("%s: %d used in the window, %d of it extra charges; the quota is %d", now, used[w], extra[w], limit.Quota)
		}
		exact()
		if !allowed {
			denials++
			if unused, _ := r.unused(); limit.Quota-used[w]-cost >= unused {
				t.Fatalf("%s: cost %d denied with %d used of %d and %d held by leases: under-admission beyond the leases", now, cost, used[w], limit.Quota, unused)
			}
		}
	}, func(p leaseReservation, to int64) {
		w := window(r.clock.Now())
		switch d := to - p.cost; {
		case d > 0:
			used[w] += d
			extra[w] += d
		case window(p.at) == w: // a refund counts in the window charged only
			used[w] += d
		}
		exact()
	})
	if denials == 0 {
		t.Error("no call was denied: the run never reached the limit")
	}
	r.finish()
	if left := r.storeRemaining(); left > 0 && limit.Quota-left != used[window(r.clock.Now())] {
		t.Errorf("the store counts %d once every lease is returned; want the %d used", limit.Quota-left, used[window(r.clock.Now())])
	}
}

// TestLeaseBoundsOfATokenBucket runs the model on a token bucket and on
// GCRA (the same bucket).
func TestLeaseBoundsOfATokenBucket(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		for _, limit := range []tokenlimit.Limit{tokenlimit.TokenBucketLimit(100, 10, time.Second), tokenlimit.GCRALimit(99, 10, time.Second)} {
			for _, reserving := range []bool{false, true} {
				name := limit.Algorithm.String() + map[bool]string{false: "/checks", true: "/reservations"}[reserving]
				t.Run(name, func(t *testing.T) { leaseBucketModel(t, store, limit, reserving) })
			}
		}
	})
}

// leaseBucketModel runs the model on limit, a bucket, on store.
func leaseBucketModel(t *testing.T, store string, limit tokenlimit.Limit, reserving bool) {
	lease := tokenlimit.Lease{Size: 20, TTL: 2 * time.Second}
	r := newLeaseRun(t, leaseStore(t, store), limit, lease)
	r.reserving = reserving
	num, den := limit.Interval()
	model := algo.NewBucket(limit.Capacity(), num, den)
	// tat is the lease-free bucket charged every admission, refund and
	// extra charge at its time; total is what was admitted less what was
	// refunded.
	var tat algo.TAT
	var total int64
	denials := 0
	r.arrivals(rand.New(rand.NewPCG(2, 23)), 3000, func(cost int64, allowed bool) {
		now := r.clock.Now()
		us := now.UnixMicro()
		if allowed {
			total += cost
			tat, _ = model.Adjust(tat, us, cost)
		}
		// Every unit admitted was charged to the bucket first: at most
		// its capacity plus its refill since the start.
		if elapsed := now.Sub(r.start).Microseconds(); total*num > limit.Capacity()*num+elapsed*den {
			t.Fatalf("%s: %d admitted in %s; the bucket grants at most %d + %d/%s", now, total, now.Sub(r.start), limit.Capacity(), limit.Quota, limit.Period)
		}
		if allowed {
			return
		}
		denials++
		unused, _ := r.unused()
		_, out := model.Check(tat, us, 0)
		if out.Remaining-cost >= unused {
			t.Fatalf("%s: cost %d denied; the lease-free bucket has %d left and leases hold %d: under-admission beyond the leases", now, cost, out.Remaining, unused)
		}
	}, func(p leaseReservation, to int64) {
		tat, _ = model.Adjust(tat, r.clock.Now().UnixMicro(), to-p.cost)
		total -= max(0, p.cost-to)
	})
	if denials == 0 {
		t.Error("no call was denied: the run never reached the limit")
	}
	r.checkIntervals(limit, lease)
	r.finish()
}

// checkIntervals checks the windowed bound of a bucket over every
// interval between two admissions: at most capacity + rate × (b − a +
// TTL) plus what leases returned in [a − TTL, b].
func (r *leaseRun) checkIntervals(limit tokenlimit.Limit, lease tokenlimit.Lease) {
	r.t.Helper()
	num, den := limit.Interval()
	adm := r.admitted
	// returnedBy(t) is what leases returned up to t (inclusive).
	r.mu.Lock()
	refunds := slices.Clone(r.refunds)
	r.mu.Unlock()
	prefix := make([]int64, len(refunds)+1)
	for k, f := range refunds {
		prefix[k+1] = prefix[k] + f.cost
	}
	returnedBy := func(t time.Time, inclusive bool) int64 {
		k, _ := slices.BinarySearchFunc(refunds, t, func(f leaseAdmission, t time.Time) int {
			if f.at.Before(t) || (inclusive && f.at.Equal(t)) {
				return -1
			}
			return 1
		})
		return prefix[k]
	}
	upTo := make([]int64, len(adm)) // returned up to each admission
	for j, a := range adm {
		upTo[j] = returnedBy(a.at, true)
	}
	for i := range adm {
		var sum int64
		from := returnedBy(adm[i].at.Add(-lease.TTL), false)
		for j := i; j < len(adm); j++ {
			sum += adm[j].cost
			span := adm[j].at.Sub(adm[i].at) + lease.TTL
			back := upTo[j] - from
			if (sum-back)*num > limit.Capacity()*num+span.Microseconds()*den {
				r.t.Fatalf("%s..%s: %d admitted, %d returned meanwhile; the bucket grants at most %d + %d/%s over %s",
					adm[i].at, adm[j].at, sum, back, limit.Capacity(), limit.Quota, limit.Period, span)
			}
		}
	}
	r.t.Logf("%s", fmt.Sprintf("%d intervals checked", len(adm)*(len(adm)+1)/2))
}
