package resilient

import (
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// This file holds a limit's lease terms and one lease's life. A lease is a
// reservation on the store: taking one reserves Size of the budget under
// the lease's id (charged atomically, recorded), the replica then decides
// calls from it in process, and returning it settles the reservation to
// what was used, so that the unused part is refunded once, only to a
// window the charge still counts in. A replica that crashes returns
// nothing: the reservation stands (under-admission, never over-admission).
// leases.go keeps each budget's leases; leasedecide.go decides calls from
// them, and leasereserve.go reservations settled in process.
// docs/algorithms.md proves the bounds.

// recordTTL is how long a lease's reservation is recorded: twice its TTL
// and recordGrace more (at most tokenlimit.MaxPeriod), so that its return
// can still be settled after a store outage as long as the lease itself,
// or a stall of the replica of recordGrace.
func recordTTL(l tokenlimit.Lease) time.Duration {
	return min(2*l.TTL+recordGrace, tokenlimit.MaxPeriod)
}

// recordGrace is what a lease's record outlives twice its TTL by.
const recordGrace = 10 * time.Second

// leaseState is where one lease is in its life.
//
//   - leaseActive: it decides calls, until its end or until it is let go
//     (the Failover closes, or its limit changed).
//   - leaseEnded: it decides nothing more and takes nothing back; its
//     unused part is returned (retried while the store fails, until its
//     record expires, when the charge stands).
type leaseState uint8

const (
	leaseActive leaseState = iota
	leaseEnded
)

// lease is one lease of a budget, held by its holder (leases.go), whose
// lock guards every field but id, size, chargedAt, expires and totals, set
// once when it is made.
type lease struct {
	id   string
	size int64
	// name is the limit's name, for metrics; record is how long the
	// lease's reservation is recorded (recordTTL), until about
	// recordEnd.
	name      string
	record    time.Duration
	recordEnd time.Time
	// used is the cost admitted from the lease: 0..size.
	used int64
	// chargedAt is when the store charged it (its reservation's
	// ReserveOutcome.At): a refund of what it paid, once it has ended,
	// is an adjustment at that time.
	chargedAt time.Time
	// expires is when it stops deciding, on the Failover's clock: the
	// time its take was sent plus its TTL (or its window's end), so that
	// it ends no later than the store would reckon.
	expires time.Time
	state   leaseState
	// stop cancels its expiry timer.
	stop func() bool
	// totals are its limit's (leases.go); listed says whether it is in
	// its holder's list, and so counted in totals' outstanding, leased
	// and unused.
	totals *leaseTotals
	listed bool
}

// The fields of a lease the returning goroutine reads are not changed
// once it has ended (leaseEnded is set under its holder's lock, before it
// is handed to that goroutine): rollbacks and payments touch active
// leases only.

// unused is what the lease can still admit.
func (l *lease) unused() int64 { return l.size - l.used }

// list counts l, just put in its holder's list, in its limit's totals.
// Its holder's lock is held, as for list, unlist and use.
func (l *lease) list() {
	l.listed = true
	l.totals.outstanding.Add(1)
	l.totals.leased.Add(l.size)
	l.totals.unused.Add(l.unused())
}

// unlist takes l, leaving its holder's list, out of its limit's totals.
func (l *lease) unlist() {
	if !l.listed {
		return
	}
	l.listed = false
	l.totals.unused.Add(-l.unused())
	l.totals.leased.Add(-l.size)
	l.totals.outstanding.Add(-1)
}

// markEnded ends l: it leaves its limit's totals and decides nothing more. Its
// holder's lock is held.
func (l *lease) markEnded() {
	l.unlist()
	l.state = leaseEnded
}

// use admits n more from l (gives -n back when n < 0).
func (l *lease) use(n int64) {
	l.used += n
	if l.listed {
		l.totals.unused.Add(-n)
	}
}
