package service

import (
	"context"
	"errors"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/resilient"
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
// not have written back yet. The period ends Options.FailOpenRecovery after
// the store first answered for the budget, or once the local budget would
// be whole again (what it admitted has refilled: for a window, the window
// the outage was in has ended), whichever comes first.

// recoveringChecks returns those of checks whose budgets recover at now
// (resilient.FailOpen.Recovering); unseen reports that the store has not
// answered for one of them since its local budget did.
func (s *Service) recoveringChecks(checks []check, now time.Time) (out []check, unseen bool) {
	for _, c := range checks {
		if rec, u := s.failOpen.Recovering(c.item, policyOf(c.limit), now); rec {
			out = append(out, c)
			unseen = unseen || u
		}
	}
	return out, unseen
}

// hasPending reports whether any of checks has cost waiting to be written
// back.
func (s *Service) hasPending(checks []check) bool {
	for _, c := range checks {
		if s.failOpen.HasPending(c.item) {
			return true
		}
	}
	return false
}

// hold is what a request charged the local budgets of its recovering
// budgets before the store was asked: refunded unless the store admits it.
type hold struct {
	checks []check // scaled to their shares
	at     time.Time
}

// holdLocal charges the local budgets of those of checks that recover,
// before the store is asked. ok is false when a local budget denied: d is
// then the decision (denied, with those limits' local answers), and the
// store is asked only for a peek, and only while it has not answered for
// one of these budgets or a write-back waits for it. While the breaker
// refuses calls it holds nothing: the store call fails at once and the
// request is decided on the local budget as in any outage.
func (s *Service) holdLocal(ctx context.Context, checks []check) (h hold, d Decision, ok bool) {
	if !s.failOpen.AnyRecovering() || !s.guard.Breaker().Ready() {
		return hold{}, Decision{}, true
	}
	recovering, unseen := s.recoveringChecks(checks, s.opts.Clock())
	if len(recovering) == 0 {
		return hold{}, Decision{}, true
	}
	h.checks = make([]check, len(recovering))
	for i, c := range recovering {
		c.item.Limit = resilient.ShareOf(c.item.Limit, c.limit.FailOpenShare)
		h.checks[i] = c
	}
	ld, err := s.local.Check(context.Background(), items(h.checks)...)
	if err != nil {
		// A full local store has no key left for these budgets: theirs
		// expired, so they are whole. The store decides alone.
		if !errors.Is(err, tokenlimit.ErrStoreFull) {
			s.log.Error("local fail-open budget failed during recovery", "error", err)
		}
		return hold{}, Decision{}, true
	}
	if ld.Allowed {
		h.at = ld.At
		return h, Decision{}, true
	}
	if unseen || s.hasPending(recovering) {
		s.peek(ctx, recovering)
	}
	return hold{}, Decision{At: ld.At, Limits: outcomes(h.checks, ld.Results, true)}, false
}

// release refunds what h charged the local budgets.
func (s *Service) release(h hold) {
	if len(h.checks) == 0 {
		return
	}
	adjs := make([]tokenlimit.Adjustment, len(h.checks))
	for i, c := range h.checks {
		adjs[i] = tokenlimit.Adjustment{Key: c.item.Key, Limit: c.item.Limit, Delta: -c.item.Cost, ChargedAt: h.at}
	}
	if err := s.localStore.Adjust(context.Background(), s.opts.Clock(), adjs); err != nil {
		s.log.Error("refunding a local fail-open budget failed", "error", err)
	}
}

// peek asks the store about checks' budgets, charging nothing: the call
// writes back what they admitted locally, and its answer starts their
// recovery periods.
func (s *Service) peek(ctx context.Context, checks []check) {
	peeks := make([]check, len(checks))
	for i, c := range checks {
		c.item.Cost = 0
		peeks[i] = c
	}
	// A failure counts towards the breaker, and the write-back waits for
	// the next call; the request is denied either way.
	_, _, _ = s.checkStore(ctx, peeks)
}
