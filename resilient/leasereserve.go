package resilient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// This file reserves for a caller that settles the reservation in this
// process, through the handle it gets back (Held), never by id elsewhere:
// the LLM proxy reserving an estimate and settling it to the usage the
// upstream reports, or a library user settling the reservation it holds.
// Each leasable item (leasable) is paid from this replica's leases as a
// check's is (leasedecide.go), and the rest is reserved on the store under
// the id, all or nothing: when the rest is refused, what the leases paid
// is given back to them. A reservation whose every item the leases pay
// makes no store call and leaves no record in the store.
//
// Settling the handle applies each lease-paid item's settled cost (under
// its rule, storekit.Settled) once:
//
//   - a refund goes back into the lease it was paid from while that lease
//     is active; once the lease has ended (returned or expired: its return
//     settled it to what it had paid, this item's estimate included) the
//     refund goes to the store, as an adjustment at the lease's charge
//     time: only to a window that charge still counts in, never above the
//     capacity, as a store settlement refunds at its reservation's;
//   - an extra charge is paid from a live lease of the budget when its
//     leases hold it, else charged on the store, even past the limit (it
//     was really used), as a store settlement charges it.
//
// The rest is settled on the store by id. A refund the store does not
// take (it fails) leaves that charge standing (under-admission, logged);
// an extra charge it does not take fails the settle with ErrUnavailable
// and is sent again by the next settle of the handle: it lands once,
// unless the failed call landed after all (then twice, which only denies
// early). The bounds of docs/algorithms.md ("Leases") hold with them: a
// unit a refund gives back to a lease was charged on the store with the
// lease, and a lease's return and a refund at its charge time are both
// the algorithm's own settlements of that charge.

// Held is a reservation made by ReserveHeld, settled in this process
// through it: what the leases paid, and whether the rest is reserved on a
// store under its id. It is safe for concurrent use and settles once,
// however often it is settled.
type Held struct {
	id     string
	status tokenlimit.ReserveStatus
	stored bool // items are reserved on a store under id
	// on is the stores holding them, when reserved through a Stores
	// (Stores.SettleHeld); empty for a Failover's.
	on storeSet

	mu      sync.Mutex
	leased  []heldItem
	applied bool          // the leased items' settlement was applied
	owed    []owedCharges // extra charges the stores have not taken yet
}

// heldItem is an item of a Held reservation that its leases paid.
type heldItem struct {
	f      *Failover
	item   tokenlimit.Item
	policy Policy
	rule   tokenlimit.SettleRule
	at     time.Time // when it was paid
	t      leaseTicket
}

// owedCharges are extra charges a store must still take.
type owedCharges struct {
	f    *Failover
	adjs []tokenlimit.Adjustment
}

// ID is the reservation's id.
func (h *Held) ID() string { return h.id }

// Status is what the reserve did: Reserved when the leases paid every
// item, otherwise the store's status for the rest (Replayed, Denied...).
func (h *Held) Status() tokenlimit.ReserveStatus { return h.status }

// OK reports whether the reservation holds a charge to settle.
func (h *Held) OK() bool { return h.status.Admitted() }

// heldOf is the handle of res, a reservation made on the store alone; nil
// when res is.
func heldOf(res *tokenlimit.Reservation) *Held {
	if res == nil {
		return nil
	}
	return &Held{id: res.ID(), status: res.Status(), stored: res.OK()}
}

// ReserveHeld is DecideReservation for a reservation that this process
// settles through the handle returned (SettleHeld), never by id: leasable
// items are paid from this replica's leases (see the top of this file).
// The handle is nil when DecideReservation's reservation would be (refused
// before or without a reservation).
func (f *Failover) ReserveHeld(ctx context.Context, req tokenlimit.ReserveRequest, policies []Policy, results []tokenlimit.Result) (*Held, Answer, error) {
	if f.leases == nil || !anyLeased(policies) {
		res, a, err := f.DecideReservation(ctx, req, policies, results)
		return heldOf(res), a, err
	}
	now := f.clock()
	held := &Held{id: req.ID, status: tokenlimit.Reserved}
	var rest []int
	for i, it := range req.Items {
		if !leasable(it, policies[i]) {
			rest = append(rest, i)
			continue
		}
		hi := heldItem{f: f, item: it, policy: policies[i], rule: storekit.Rule(req, i), at: now}
		paid, err := f.leases.pay(ctx, it, policies[i], now, &hi.t, &results[i])
		if err != nil {
			held.rollback()
			return nil, Answer{}, err
		}
		if paid {
			held.leased = append(held.leased, hi)
		} else {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 {
		return held, Answer{At: now, Allowed: true, Source: FromLease}, nil
	}
	sub := tokenlimit.ReserveRequest{ID: req.ID, TTL: req.TTL}
	for _, i := range rest {
		if len(req.Rules) > 0 {
			sub.Rules = append(sub.Rules, req.Rules[i])
		}
		if len(req.Notes) > 0 {
			sub.Notes = append(sub.Notes, req.Notes[i])
		}
	}
	var res *tokenlimit.Reservation
	a, err := onRest(req.Items, policies, results, rest, func(items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result) (Answer, error) {
		sub.Items = items
		var a Answer
		var err error
		res, a, err = f.DecideReservation(ctx, sub, policies, results)
		return a, err
	})
	if err != nil || res == nil || !res.OK() || a.Full || !a.Allowed {
		held.rollback()
	}
	switch {
	case err != nil:
		return nil, Answer{}, err
	case res == nil:
		return nil, a, nil
	}
	held.status, held.stored = res.Status(), res.OK()
	return held, a, nil
}

// rollback gives back what the leases paid, before the reservation is
// answered (the rest was refused).
func (h *Held) rollback() {
	for i := range h.leased {
		h.leased[i].t.rollback()
	}
	h.leased = nil
}

// SettleHeld settles h, reserved by ReserveHeld on f, with req (req.ID
// must be h's): what the leases paid as the top of this file says, the
// rest on the store as Settle does. It answers Settled when this call
// applied the settlement (or its last part), AlreadySettled when an
// earlier one did, UnknownReservation for a reservation that holds no
// charge or whose store record expired; an error leaves nothing applied
// twice, and retrying applies what is left once.
func (f *Failover) SettleHeld(ctx context.Context, h *Held, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	return h.settle(ctx, req, func(ctx context.Context, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
		return f.Settle(ctx, time.Time{}, req)
	})
}

// settle applies req to h: its leased items once, then the extra charges
// still owed, then its store part through onStore.
func (h *Held) settle(ctx context.Context, req tokenlimit.SettleRequest, onStore func(context.Context, tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error)) (tokenlimit.SettleStatus, error) {
	check := req
	if check.TTL == 0 { // the store's default applies to the store's part
		check.TTL = tokenlimit.DefaultReservationTTL
	}
	if err := check.Validate(); err != nil {
		return 0, fmt.Errorf("resilient: settle: %w", err)
	}
	if req.ID != h.id {
		return 0, fmt.Errorf("resilient: settle %q through the handle of %q: %w", req.ID, h.id, tokenlimit.ErrInvalid)
	}
	if req.Noted != nil {
		*req.Noted = (*req.Noted)[:0]
	}
	if !h.OK() {
		return tokenlimit.UnknownReservation, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := tokenlimit.AlreadySettled
	if !h.applied {
		h.applied, st = true, tokenlimit.Settled
		h.apply(ctx, req)
	}
	if len(h.owed) > 0 {
		if err := h.chargeOwed(ctx); err != nil {
			return 0, err
		}
		st = tokenlimit.Settled
	}
	if !h.stored {
		return st, nil
	}
	onStoreSt, err := onStore(ctx, req)
	switch {
	case err != nil:
		return 0, err
	case len(h.leased) == 0:
		return onStoreSt, nil
	}
	return min(st, onStoreSt), nil // Settled before AlreadySettled before UnknownReservation
}

// apply settles each leased item to its cost under req: refunds to the
// leases still active and, for those that ended, on the store at their
// charge times; extra charges from the leases when they hold them, the
// others owed to the store (h.owed). h.mu is held.
func (h *Held) apply(ctx context.Context, req tokenlimit.SettleRequest) {
	var refunds []owedCharges
	for i := range h.leased {
		hi := &h.leased[i]
		it := hi.item
		delta := storekit.SettleDelta(it.Limit, it.Cost, storekit.Settled(req, hi.rule, it.Cost))
		switch {
		case delta < 0:
			for _, p := range hi.f.leases.refund(&hi.t, -delta, hi.f.clock()) {
				if p.n > 0 {
					refunds = owe(refunds, hi.f, tokenlimit.Adjustment{Key: it.Key, Limit: it.Limit, Delta: -p.n, ChargedAt: p.l.chargedAt})
				}
			}
		case delta > 0:
			more := tokenlimit.Item{Key: it.Key, Limit: it.Limit, Cost: delta}
			if leasable(more, hi.policy) && hi.f.leases.payMore(hi.t.h, it.Limit, hi.policy, delta, hi.f.clock()) {
				continue
			}
			h.owed = owe(h.owed, hi.f, tokenlimit.Adjustment{Key: it.Key, Limit: it.Limit, Delta: delta, ChargedAt: hi.at})
		}
	}
	for _, o := range refunds {
		if err := o.f.adjustStore(ctx, opRefund, o.adjs); err != nil {
			o.f.log.Error("refunding a reservation paid from a lease that has ended failed: its charge stands until the budget refills it",
				"id", h.id, "error", err)
		}
	}
}

// owe adds adj to what os owes f's store, to the adjustment of its budget
// if there is one already (a store takes one per budget in a call). Their
// charge times may differ but not matter: the leases a reservation's item
// was paid from were charged in the window it was paid in (a fixed
// window's leases end with their window), and a bucket's adjustment does
// not depend on it.
func owe(os []owedCharges, f *Failover, adj tokenlimit.Adjustment) []owedCharges {
	for i := range os {
		if os[i].f != f {
			continue
		}
		for j := range os[i].adjs {
			if a := &os[i].adjs[j]; a.Key == adj.Key && a.Limit.Algorithm == adj.Limit.Algorithm {
				a.Delta += adj.Delta
				return os
			}
		}
		os[i].adjs = append(os[i].adjs, adj)
		return os
	}
	return append(os, owedCharges{f: f, adjs: []tokenlimit.Adjustment{adj}})
}

// chargeOwed charges each store the extra charges it owes. A failing
// store's stay owed (ErrUnavailable); a store that refuses them (an
// invalid adjustment) has them dropped, logged. h.mu is held.
func (h *Held) chargeOwed(ctx context.Context) error {
	left := h.owed[:0]
	var first error
	for _, o := range h.owed {
		err := o.f.adjustStore(ctx, opSettle, o.adjs)
		switch {
		case errors.Is(err, ErrUnavailable):
			left = append(left, o)
			if first == nil {
				first = fmt.Errorf("resilient: settle %q: charging what its leased items used past their estimates: %w", h.id, err)
			}
		case err != nil:
			o.f.log.Error("charging what a reservation used past its estimate was refused", "id", h.id, "error", err)
		}
	}
	clear(h.owed[len(left):])
	h.owed = left
	return first
}
