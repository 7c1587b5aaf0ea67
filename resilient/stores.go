package resilient

import (
	"cmp"
	"context"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// This file routes the service's store calls when budgets live in more than
// one store: the main store and named ones (a global limit's home region),
// each behind a Failover of its own (deadline, breaker, local budgets,
// reconciling). Each item goes to the store its Policy.Store names.
//
// A call whose items all lie in one store is that store's call, all or
// nothing, unchanged. A call spanning stores is decided store by store, the
// main store first, then the named ones in the order given to NewStores:
// each store's part all or nothing. When a part is refused (denied, failing
// closed, full, held), the parts already admitted are taken back: a check's
// charge is refunded at the time it was charged (exact for every
// algorithm), on the store or on the local budget that admitted it; a
// reservation's part is undone (SettleRequest.Undo), so that the id
// reserves afresh later. So nothing is admitted that every store did not
// admit, and a refused request is charged nothing, with three limits:
// between a part's charge and its refund another caller may be denied by
// it; a refund the store cannot take (it fails meanwhile) leaves that
// charge standing until the budget refills it; and a budget recovering
// from an outage keeps the local charge of its recovery hold.

// Stores is the fault layer over several stores: one Failover each, by
// name, the main store's first. It is safe for concurrent use.
type Stores struct {
	names  []string    // names[0] is the main store's
	layers []*Failover // layers[i] is names[i]'s
	// placed is where the reservations made through s are (placements.go).
	placed *placements
}

// NamedLayer is a store's fault layer with the name limits give it.
type NamedLayer struct {
	Name  string
	Layer *Failover
}

// NewStores routes items whose Policy.Store is "" or main.Name to
// main.Layer, and those naming one of named to its layer (at most 63);
// parts of a call spanning stores are decided in this order.
func NewStores(main NamedLayer, named ...NamedLayer) (*Stores, error) {
	s := &Stores{placed: newPlacements(maxPlacements)}
	if len(named) >= maxStores {
		return nil, fmt.Errorf("resilient: NewStores: at most %d named stores, got %d", maxStores-1, len(named))
	}
	for _, l := range append([]NamedLayer{main}, named...) {
		switch {
		case l.Layer == nil:
			return nil, fmt.Errorf("resilient: NewStores: store %q has no layer", l.Name)
		case slices.Contains(s.names, l.Name) || l.Name == "":
			return nil, fmt.Errorf("resilient: NewStores: store names must be distinct and not empty, got %q twice or empty", l.Name)
		}
		s.names = append(s.names, l.Name)
		s.layers = append(s.layers, l.Layer)
	}
	return s, nil
}

// Main returns the main store's layer.
func (s *Stores) Main() *Failover { return s.layers[0] }

// Layers returns every store's layer with its name, the main store's
// first.
func (s *Stores) Layers() []NamedLayer {
	out := make([]NamedLayer, len(s.layers))
	for i := range s.layers {
		out[i] = NamedLayer{s.names[i], s.layers[i]}
	}
	return out
}

// Has reports whether a policy may name the store name.
func (s *Stores) Has(name string) bool { return name == "" || slices.Contains(s.names, name) }

// index returns the layer of the store name.
func (s *Stores) index(name string) (int, error) {
	if name == "" {
		return 0, nil
	}
	if i := slices.Index(s.names, name); i >= 0 {
		return i, nil
	}
	return 0, fmt.Errorf("resilient: no store named %q: %w", name, tokenlimit.ErrInvalid)
}

// single returns the layer every policy names, if they name one.
func (s *Stores) single(policies []Policy) (int, bool, error) {
	if len(s.layers) == 1 || len(policies) == 0 {
		return 0, true, nil
	}
	for _, p := range policies[1:] {
		if p.Store != policies[0].Store {
			return 0, false, nil
		}
	}
	i, err := s.index(policies[0].Store)
	return i, true, err
}

// part is the items of one store in a call spanning stores: their indexes
// in the call, and copies of their items, policies and results.
type part struct {
	layer    *Failover
	store    int // the layer's index in Stores.layers
	indexes  []int
	items    []tokenlimit.Item
	policies []Policy
	results  []tokenlimit.Result
	rules    []tokenlimit.SettleRule
	notes    []string
	// admitted is the part's answer once it admitted the call.
	admitted Answer
}

// split cuts a call into its stores' parts, in the stores' order, with
// the rules and notes of a reservation's items (nil for a check).
func (s *Stores) split(items []tokenlimit.Item, policies []Policy, rules []tokenlimit.SettleRule, notes []string) ([]part, error) {
	parts := make([]part, len(s.layers))
	for i, p := range policies {
		l, err := s.index(p.Store)
		if err != nil {
			return nil, err
		}
		pt := &parts[l]
		pt.indexes = append(pt.indexes, i)
		pt.items = append(pt.items, items[i])
		pt.policies = append(pt.policies, p)
		if len(rules) > 0 {
			pt.rules = append(pt.rules, rules[i])
		}
		if len(notes) > 0 {
			pt.notes = append(pt.notes, notes[i])
		}
	}
	out := parts[:0]
	for l := range parts {
		if len(parts[l].items) > 0 {
			parts[l].layer, parts[l].store = s.layers[l], l
			parts[l].results = make([]tokenlimit.Result, len(parts[l].items))
			out = append(out, parts[l])
		}
	}
	return out, nil
}

// answerOf maps a part's answer to the call's indexes: the items it
// answered (all of the part's when a.Items is nil).
func (pt *part) answerOf(a Answer) Answer {
	answered := pt.indexes
	if a.Items != nil {
		answered = make([]int, len(a.Items))
		for j, i := range a.Items {
			answered[j] = pt.indexes[i]
		}
	}
	a.Items = answered
	return a
}

// copyResults copies the part's results into the call's.
func (pt *part) copyResults(results []tokenlimit.Result) {
	for j, i := range pt.indexes {
		results[i] = pt.results[j]
	}
}

// Decide is Failover.Decide on the store each item's policy names (see
// the top of this file for a call spanning stores). A refused call
// spanning stores answers with the refusing store's answer: Answer.Items
// are the items it answered.
func (s *Stores) Decide(ctx context.Context, items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result) (Answer, error) {
	refused := func(a Answer) bool { return a.Full || !a.Allowed }
	return s.byStore(ctx, items, policies, results, (*Failover).Decide, refused, func(admitted []part) { s.refund(ctx, admitted) })
}

// Peek is Failover.Peek on the store each item's policy names: a call
// spanning stores peeks at each store's part, and answers with the first
// part's answer that is not from the store or the leases (a failing
// store, a full one).
func (s *Stores) Peek(ctx context.Context, items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result) (Answer, error) {
	unanswered := func(a Answer) bool { return a.Full || (a.Source != FromStore && a.Source != FromLease) }
	return s.byStore(ctx, items, policies, results, (*Failover).Peek, unanswered, func([]part) {})
}

// byStore decides a call with decide on the store each item's policy
// names: a call spanning stores part by part, in order, until a part's
// answer ends it (ends), which then answers it once undo has taken back
// the parts before; a part's error is the call's, after undo.
func (s *Stores) byStore(ctx context.Context, items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result,
	decide func(*Failover, context.Context, []tokenlimit.Item, []Policy, []tokenlimit.Result) (Answer, error),
	ends func(Answer) bool, undo func(admitted []part)) (Answer, error) {
	l, one, err := s.single(policies)
	switch {
	case err != nil:
		return Answer{}, err
	case one:
		return decide(s.layers[l], ctx, items, policies, results)
	}
	parts, err := s.split(items, policies, nil, nil)
	if err != nil {
		return Answer{}, err
	}
	for k := range parts {
		pt := &parts[k]
		a, err := decide(pt.layer, ctx, pt.items, pt.policies, pt.results)
		if err == nil {
			pt.copyResults(results)
		}
		if err != nil || ends(a) {
			undo(parts[:k])
			if err != nil {
				return Answer{}, err
			}
			return pt.answerOf(a), nil
		}
		parts[k].admitted = a
	}
	return merge(parts), nil
}

// merge is the answer of a call whose parts all admitted it: the first
// part's time; FromLocal with the items decided locally (Answer.Local) if
// any part was decided on its local budgets, else FromLease if the leases
// paid every part, else FromStore.
func merge(parts []part) Answer {
	whole := Answer{At: parts[0].admitted.At, Allowed: true, Source: FromLease}
	var local []int
	for _, pt := range parts {
		switch pt.admitted.Source {
		case FromLocal:
			local = append(local, pt.indexes...)
		case FromLease:
		default:
			whole.Source = FromStore
		}
	}
	if local != nil {
		whole.Source, whole.Local = FromLocal, local
	}
	return whole
}

// refund takes back the charges of parts, each admitted.
func (s *Stores) refund(ctx context.Context, parts []part) {
	for _, pt := range parts {
		pt.layer.refund(ctx, pt.items, pt.policies, pt.admitted)
	}
}

// DecideReservation is Failover.DecideReservation on the store each item's
// policy names. A reservation spanning stores is recorded in each of them
// under req.ID, with its part of the items; when a part is refused, the
// parts already reserved are undone (see the top of this file). The
// reservation returned is the last part's, Reserved if any part is (the
// others replayed a reserve whose reply was lost). An admitted
// reservation's stores are remembered (placements.go), so that settling
// it here goes to them alone.
func (s *Stores) DecideReservation(ctx context.Context, req tokenlimit.ReserveRequest, policies []Policy, results []tokenlimit.Result) (*tokenlimit.Reservation, Answer, error) {
	if len(s.layers) == 1 {
		return s.layers[0].DecideReservation(ctx, req, policies, results)
	}
	l, one, err := s.single(policies)
	switch {
	case err != nil:
		return nil, Answer{}, err
	case one:
		s.placed.widen(req.ID, storeBit(l))
		res, a, err := s.layers[l].DecideReservation(ctx, req, policies, results)
		if err == nil && res != nil && res.OK() {
			s.place(req, storeBit(l))
		}
		return res, a, err
	}
	parts, err := s.split(req.Items, policies, req.Rules, req.Notes)
	if err != nil {
		return nil, Answer{}, err
	}
	on := partsOn(parts)
	s.placed.widen(req.ID, on)
	var res *tokenlimit.Reservation
	for k := range parts {
		pt := &parts[k]
		preq := tokenlimit.ReserveRequest{ID: req.ID, Items: pt.items, Rules: pt.rules, TTL: req.TTL, Notes: pt.notes}
		r, a, err := pt.layer.DecideReservation(ctx, preq, pt.policies, pt.results)
		if err == nil {
			pt.copyResults(results)
		}
		if err != nil || r == nil || !r.OK() || a.Full || !a.Allowed {
			s.undo(ctx, parts[:k], req)
			if err != nil {
				return nil, Answer{}, err
			}
			return r, pt.answerOf(a), nil
		}
		if res == nil || r.Status() == tokenlimit.Reserved {
			res = r
		}
		parts[k].admitted = a
	}
	s.place(req, on)
	return res, merge(parts), nil
}

// partsOn is the set of the stores of parts.
func partsOn(parts []part) storeSet {
	var on storeSet
	for _, pt := range parts {
		on |= storeBit(pt.store)
	}
	return on
}

// place remembers that req's reservation is held on the stores on, until
// its TTL (the main store's ReservationTTL when 0) ends.
func (s *Stores) place(req tokenlimit.ReserveRequest, on storeSet) {
	main := s.layers[0]
	s.placed.add(req.ID, on, main.clock().Add(cmp.Or(req.TTL, main.ttl)))
}

// ReserveHeld is Failover.ReserveHeld on the store each item's policy
// names: a reservation spanning stores is reserved store by store as
// DecideReservation does, each part paying its leased items from its
// store's leases; when a part is refused, the parts already reserved give
// back what their leases paid, and those recorded in a store are undone.
func (s *Stores) ReserveHeld(ctx context.Context, req tokenlimit.ReserveRequest, policies []Policy, results []tokenlimit.Result) (*Held, Answer, error) {
	l, one, err := s.single(policies)
	switch {
	case err != nil:
		return nil, Answer{}, err
	case one:
		h, a, err := s.layers[l].ReserveHeld(ctx, req, policies, results)
		if h != nil {
			h.on = storeBit(l)
		}
		return h, a, err
	}
	parts, err := s.split(req.Items, policies, req.Rules, req.Notes)
	if err != nil {
		return nil, Answer{}, err
	}
	held := &Held{id: req.ID, status: tokenlimit.Replayed}
	var stored []part // the parts recorded in their stores
	for k := range parts {
		pt := &parts[k]
		preq := tokenlimit.ReserveRequest{ID: req.ID, Items: pt.items, Rules: pt.rules, TTL: req.TTL, Notes: pt.notes}
		h, a, err := pt.layer.ReserveHeld(ctx, preq, pt.policies, pt.results)
		if err == nil {
			pt.copyResults(results)
		}
		if err != nil || h == nil || !h.OK() || a.Full || !a.Allowed {
			held.rollback()
			s.undo(ctx, stored, req)
			if err != nil {
				return nil, Answer{}, err
			}
			return h, pt.answerOf(a), nil
		}
		held.leased = append(held.leased, h.leased...)
		if h.stored {
			held.stored = true
			held.on |= storeBit(pt.store)
			stored = append(stored, *pt)
		}
		if h.status == tokenlimit.Reserved {
			held.status = tokenlimit.Reserved
		}
		parts[k].admitted = a
	}
	return held, merge(parts), nil
}

// SettleHeld is Failover.SettleHeld for h, reserved by ReserveHeld: the
// part on the stores is settled as Settle does, on the stores holding it
// alone (the handle knows them).
func (s *Stores) SettleHeld(ctx context.Context, h *Held, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	return h.settle(ctx, req, func(ctx context.Context, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
		return s.settleOn(ctx, time.Time{}, req, h.on)
	})
}

// undo takes back the reservations of parts, each reserved under req.ID.
func (s *Stores) undo(ctx context.Context, parts []part, req tokenlimit.ReserveRequest) {
	for _, pt := range parts {
		// Not on the caller's context: it may be what ended the call. The
		// store's deadline still bounds it.
		_, err := pt.layer.Settle(context.WithoutCancel(ctx), time.Time{}, tokenlimit.SettleRequest{ID: req.ID, Undo: true, TTL: req.TTL})
		if err != nil {
			pt.layer.log.Error("undoing the part of a reservation another store refused failed: it stays charged until it is settled or expires",
				"error", err)
		}
	}
}

// Settle settles req on the stores holding the reservation, at once: those
// a reserve through s on this replica recorded it in (placements.go),
// else, since its id alone does not say which, every store (a reservation
// made on another replica, or one forgotten). The status is the most
// advanced any of them reports (Settled, then AlreadySettled, then
// UnknownReservation), and the error the first store's that failed
// (retrying is safe: settling applies once). A store sent the settle
// without holding the record keeps a tombstone of the id
// (SettleRequest.TTL). req.Noted receives the noted items of every store
// that settled.
func (s *Stores) Settle(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	if len(s.layers) == 1 {
		return s.layers[0].Settle(ctx, now, req)
	}
	on, known := s.placed.where(req.ID, s.layers[0].clock())
	st, err := s.settleOn(ctx, now, req, on)
	if err == nil && known {
		s.placed.forget(req.ID) // settled: a retry goes everywhere, and finds it so
	}
	return st, err
}

// settleOn settles req at once on the stores in on, every store when on
// is empty (see Settle).
func (s *Stores) settleOn(ctx context.Context, now time.Time, req tokenlimit.SettleRequest, on storeSet) (tokenlimit.SettleStatus, error) {
	if on == 0 {
		on = storeBit(len(s.layers)) - 1
	}
	if on&(on-1) == 0 { // one store
		return s.layers[bits.TrailingZeros64(uint64(on))].Settle(ctx, now, req)
	}
	statuses := make([]tokenlimit.SettleStatus, len(s.layers))
	errs := make([]error, len(s.layers))
	noted := make([][]tokenlimit.Noted, len(s.layers))
	var wg sync.WaitGroup
	for i, l := range s.layers {
		if !on.has(i) {
			statuses[i] = tokenlimit.UnknownReservation
			continue
		}
		lreq := req
		if req.Noted != nil {
			lreq.Noted = &noted[i] // each store its own: they settle at once
		}
		wg.Go(func() { statuses[i], errs[i] = l.Settle(ctx, now, lreq) })
	}
	wg.Wait()
	status := tokenlimit.UnknownReservation
	for i := range s.layers {
		if errs[i] != nil {
			return 0, errs[i]
		}
		status = min(status, statuses[i]) // Settled before AlreadySettled before UnknownReservation
	}
	if req.Noted != nil {
		*req.Noted = slices.Concat(noted...)
	}
	return status, nil
}

// StoreHealth is one store's health with its name.
type StoreHealth struct {
	Name string
	Health
}

// Health returns every store's health, the main store's first (see
// Failover.Health).
func (s *Stores) Health(ctx context.Context) []StoreHealth {
	out := make([]StoreHealth, len(s.layers))
	for i, l := range s.layers {
		out[i] = StoreHealth{s.names[i], l.Health(ctx)}
	}
	return out
}

// Close closes every store's layer (Failover.Close: their leases are
// returned), waiting for them or for ctx; the first error is returned.
func (s *Stores) Close(ctx context.Context) error {
	return s.eachLayer(func(f *Failover) error { return f.Close(ctx) })
}

// ReturnLeases returns the leases of every store's layer
// (Failover.ReturnLeases); the first error is returned.
func (s *Stores) ReturnLeases(ctx context.Context) error {
	return s.eachLayer(func(f *Failover) error { return f.ReturnLeases(ctx) })
}

// eachLayer runs fn on every layer at once and returns the first error.
func (s *Stores) eachLayer(fn func(f *Failover) error) error {
	errs := make([]error, len(s.layers))
	var wg sync.WaitGroup
	for i, l := range s.layers {
		wg.Go(func() { errs[i] = fn(l) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// LeaseStats returns what each limit's leases hold on this replica and
// their totals (Failover.LeaseStats), summed over every store (a limit
// moved to another store by a reload has totals in both), by the limit's
// name.
func (s *Stores) LeaseStats() map[string]LeaseStats {
	out := map[string]LeaseStats{}
	for _, l := range s.layers {
		for name, st := range l.LeaseStats() {
			out[name] = out[name].add(st)
		}
	}
	return out
}
