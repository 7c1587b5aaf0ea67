package resilient

import (
	"context"
	"errors"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// This file closes the recovery gap of fail-open budgets. When the store
// answers again after an outage, each replica writes back what it admitted
// locally before its next call for a budget, but the replicas do not reach
// the store at the same moment (a breaker cooldown, a cluster client's
// topology refresh apart): the first one back is answered from a count that
// lacks what the others admitted locally and have not written back yet, and
// the store would grant it again what they already admitted.
//
// So once a budget was answered on its local budget, it keeps to that local
// budget for a recovery period after the store answers again: a request is
// charged on the local budget first (which refills at its own rate) and
// only then asked of the store; the store's denial refunds the local charge,
// and a local denial denies without asking the store to check anything
// (but, in a call of its own, to take the write-back waiting for the
// budget, so that the other replicas are counted it, or, until the store
// has answered for the budget once, a peek, to start the period). A
// replica thus admits at most its local share while any replica may
// not have written back yet. The period ends FailoverOptions.Recovery after
// the store first answered for the budget, or once the local budget would
// be whole again (what it admitted has refilled: for a window, the window
// the outage was in has ended), whichever comes first: budget.go's table.

// recovering returns the indexes of those of items whose budgets recover
// at now (FailOpen.Recovering); unseen reports that the store has not
// answered for one of them since its local budget did.
func (f *Failover) recovering(items []tokenlimit.Item, policies []Policy, now time.Time) (out []int, unseen bool) {
	for i, it := range items {
		if rec, u := f.memory.Recovering(it, policies[i], now); rec {
			out = append(out, i)
			unseen = unseen || u
		}
	}
	return out, unseen
}

// hold is what a request charged the local budgets of its recovering
// budgets before the store was asked: refunded unless the store admits it.
type hold struct {
	items []tokenlimit.Item // at their shares
	at    time.Time
}

// holdLocal charges the local budgets of those of items that recover,
// before the store is asked. held is true when a local budget denied: a is
// then the answer (HeldLocal, with those items' local results), and the
// store is asked only for a peek, and only while it has not answered for
// one of these budgets or a write-back waits for it. While the breaker
// refuses calls it holds nothing: the store call fails at once and the
// request is decided on the local budgets as in any outage.
func (f *Failover) holdLocal(ctx context.Context, items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result) (h hold, a Answer, held bool) {
	if !f.memory.AnyRecovering() || !f.guard.Breaker().Ready() {
		return hold{}, Answer{}, false
	}
	recovering, unseen := f.recovering(items, policies, f.clock())
	if len(recovering) == 0 {
		return hold{}, Answer{}, false
	}
	h.items = make([]tokenlimit.Item, len(recovering))
	for j, i := range recovering {
		h.items[j] = items[i]
		h.items[j].Limit = ShareOf(items[i].Limit, policies[i].Share)
	}
	ld, err := f.local.Check(context.Background(), h.items...)
	if err != nil {
		// A full local store has no key left for these budgets: theirs
		// expired, so they are whole. The store decides alone.
		if !errors.Is(err, tokenlimit.ErrStoreFull) {
			f.log.Error("local fail-open budget failed during recovery", "error", err)
		}
		return hold{}, Answer{}, false
	}
	if ld.Allowed {
		h.at = ld.At
		return h, Answer{}, false
	}
	if unseen || f.hasPending(h.items) {
		f.peek(ctx, items, policies, recovering)
	}
	for j, i := range recovering {
		results[i] = ld.Results[j]
	}
	return hold{}, Answer{At: ld.At, Source: HeldLocal, Items: recovering}, true
}

// hasPending reports whether any of items has cost waiting to be written
// back.
func (f *Failover) hasPending(items []tokenlimit.Item) bool {
	for _, it := range items {
		if f.memory.HasPending(it) {
			return true
		}
	}
	return false
}

// release refunds what h charged the local budgets.
func (f *Failover) release(h hold) {
	if len(h.items) == 0 {
		return
	}
	adjs := make([]tokenlimit.Adjustment, len(h.items))
	for i, it := range h.items {
		adjs[i] = tokenlimit.Adjustment{Key: it.Key, Limit: it.Limit, Delta: -it.Cost, ChargedAt: h.at}
	}
	if err := f.localStore.Adjust(context.Background(), f.clock(), adjs); err != nil {
		f.log.Error("refunding a local fail-open budget failed", "error", err)
	}
}

// peek asks the store about the budgets of items at the indexes which,
// charging nothing: the call writes back what they admitted locally, and
// its answer starts their recovery periods.
func (f *Failover) peek(ctx context.Context, items []tokenlimit.Item, policies []Policy, which []int) {
	peeks := make([]tokenlimit.Item, len(which))
	ps := make([]Policy, len(which))
	for j, i := range which {
		peeks[j], ps[j] = items[i], policies[i]
		peeks[j].Cost = 0
	}
	// A failure counts towards the breaker, and the write-back waits for
	// the next call; the request is denied either way.
	_, _, _ = f.checkStore(ctx, peeks, ps, make([]tokenlimit.Result, len(peeks)))
}
