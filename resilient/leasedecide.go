package resilient

import (
	"context"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// This file decides calls whose items include leased ones (Policy.Lease):
// each leased item is paid from this replica's leases of its budget
// (leases.go) and the rest go to the store (or the failure modes) as
// without leases, all or nothing: when the rest is refused, what the
// leases paid is given back to them. A call whose every item the leases
// pay makes no store call. An item the leases cannot pay (its budget has
// less than a lease left, the store failed to give one, the table is
// full) is decided on the store with the rest, so a leased limit follows
// its failure mode once its leases are spent.

// anyLeased reports whether any of policies takes leases.
func anyLeased(policies []Policy) bool {
	for i := range policies {
		if policies[i].Lease.Size > 0 {
			return true
		}
	}
	return false
}

// leasable reports whether it is paid from leases under p: a charge (not
// a peek) no larger than a lease, of an enforced, leasable limit.
func leasable(it tokenlimit.Item, p Policy) bool {
	return p.Lease.On() && !p.Shadow && !p.Concurrency && it.Cost > 0 && it.Cost <= p.Lease.Size && it.Limit.Algorithm.Leasable()
}

// fewLeased is how many leased items a call pays without allocating.
const fewLeased = 4

// decideLeased is Decide for a call with leased items.
func (f *Failover) decideLeased(ctx context.Context, items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result) (Answer, error) {
	var ticketBuf [fewLeased]leaseTicket
	var restBuf [fewLeased]int
	tickets, rest := ticketBuf[:0], restBuf[:0]
	now := f.clock()
	for i, it := range items {
		if !leasable(it, policies[i]) {
			rest = append(rest, i)
			continue
		}
		var t leaseTicket
		paid, err := f.leases.pay(ctx, it, policies[i], now, &t, &results[i])
		if err != nil {
			rollback(tickets)
			return Answer{}, err
		}
		if paid {
			tickets = append(tickets, t)
		} else {
			rest = append(rest, i)
		}
	}
	a, err := f.decideRest(ctx, items, policies, results, rest, now)
	if err != nil || !a.Allowed || a.Full {
		rollback(tickets)
	}
	return a, err
}

// decideRest decides on the store (or its failure modes) the items at
// indexes rest, those the leases did not answer at now: when none are
// left the leases answered the call; when all are, it is decided whole.
func (f *Failover) decideRest(ctx context.Context, items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result, rest []int, now time.Time) (Answer, error) {
	switch len(rest) {
	case 0:
		return Answer{At: now, Allowed: true, Source: FromLease}, nil
	case len(items):
		return f.decide(ctx, items, policies, results)
	}
	return onRest(items, policies, results, rest, func(items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result) (Answer, error) {
		return f.decide(ctx, items, policies, results)
	})
}

// onRest runs decide on the items at indexes rest (those no lease paid),
// with their policies and results, then copies their results back and
// maps the answer's Items to indexes of items.
func onRest(items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result, rest []int,
	decide func(items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result) (Answer, error)) (Answer, error) {
	subItems, subPolicies, subResults := make([]tokenlimit.Item, len(rest)), make([]Policy, len(rest)), make([]tokenlimit.Result, len(rest))
	for j, i := range rest {
		subItems[j], subPolicies[j] = items[i], policies[i]
	}
	a, err := decide(subItems, subPolicies, subResults)
	for j, i := range rest {
		results[i] = subResults[j]
	}
	for j, i := range a.Items {
		a.Items[j] = rest[i]
	}
	return a, err
}

// Peek is Decide for peeks (items of cost 0) that answers each leased
// item whose budget this replica holds a live lease of from its leases,
// with no store call: its Remaining is then an estimate, as a leased
// call's (what the store had left at this replica's last take plus what
// its leases hold). The other items are peeked at on the store as Decide
// does. Source is FromLease when the leases answered every item.
func (f *Failover) Peek(ctx context.Context, items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result) (Answer, error) {
	if f.leases == nil || !anyLeased(policies) {
		return f.decide(ctx, items, policies, results)
	}
	now := f.clock()
	var rest []int
	for i, it := range items {
		if it.Cost != 0 || !policies[i].Lease.On() || !f.leases.peek(it, policies[i], now, &results[i]) {
			rest = append(rest, i)
		}
	}
	return f.decideRest(ctx, items, policies, results, rest, now)
}

// rollback gives back what tickets paid.
func rollback(tickets []leaseTicket) {
	for i := range tickets {
		tickets[i].rollback()
	}
}

// Close returns every lease this replica holds (their unused parts are
// refunded) and takes no more: leased items are decided on the store from
// then on. It waits for the returns and the takes in flight, or for ctx.
// Calling it again does nothing.
func (f *Failover) Close(ctx context.Context) error {
	if f.leases == nil {
		return nil
	}
	return f.leases.close(ctx)
}

// ReturnLeases returns every lease this replica holds, as when their
// limits change (a reload), and waits for the returns or for ctx; the
// next calls take new ones.
func (f *Failover) ReturnLeases(ctx context.Context) error {
	if f.leases == nil {
		return nil
	}
	return f.leases.returnAll(ctx)
}

// LeaseStats returns what each limit's leases hold on this replica and
// what became of its leases since f was made, by the limit's name
// (Policy.Limit); limits that never asked for a lease are left out.
func (f *Failover) LeaseStats() map[string]LeaseStats {
	if f.leases == nil {
		return map[string]LeaseStats{}
	}
	return f.leases.stats()
}
