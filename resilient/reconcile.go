package resilient

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// reconciler holds what the store must still be told of the reservations
// taken on the local fail-open budget while it failed, by id:
//
//   - the reservation itself: the store's request is sent again once the
//     store answers. A copy that reached the store after all (its reply was
//     late) is replayed and charges nothing; one that never did is charged
//     then (or denied, if the store's budget has no room left: then the
//     store does not count it). Either way the store holds one record of
//     the id, so the reservation is charged there at most once, and never
//     also written back as a plain fail-open charge;
//   - its settlement, if it was settled locally meanwhile: sent after the
//     reservation, it settles the store's record to the real cost (or, when
//     the store denied the reservation, leaves a tombstone so that a copy
//     still in flight charges nothing).
//
// An entry is dropped when the reservations' TTL has passed (the store's
// record, if any, has expired with it). The entries live in this process
// only: if it stops first, a late charge in the store stands as its
// estimate until its window passes.
type reconciler struct {
	max int

	mu   sync.Mutex
	byID map[string]*pendingEntry

	running atomic.Bool // a drain is under way
}

// pendingEntry is what waits for one id. Entries are replaced, never
// changed, so that a drain finishing one removes it only if nothing was
// added meanwhile.
type pendingEntry struct {
	reserve *tokenlimit.ReserveRequest // the store's request; nil once the store has it
	settle  *tokenlimit.SettleRequest  // nil while not settled locally
	until   time.Time
}

func newReconciler(max int) *reconciler {
	return &reconciler{max: max, byID: map[string]*pendingEntry{}}
}

// update replaces id's entry by edit's change of a copy of it (a zero one
// if there is none); a new id past max entries fails with
// ErrTooManyReservations.
func (r *reconciler) update(id string, until time.Time, edit func(*pendingEntry)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.byID[id]
	if !ok && len(r.byID) >= r.max {
		return fmt.Errorf("%w: %d, the limit of FailoverOptions.MaxReservations", ErrTooManyReservations, r.max)
	}
	e := &pendingEntry{until: until}
	if ok {
		*e = *old
	}
	edit(e)
	r.byID[id] = e
	return nil
}

// addReserve queues the store's request of a reservation taken locally.
func (r *reconciler) addReserve(req tokenlimit.ReserveRequest, until time.Time) error {
	return r.update(req.ID, until, func(e *pendingEntry) { e.reserve = &req })
}

// addSettle queues id's local settlement.
func (r *reconciler) addSettle(req tokenlimit.SettleRequest, until time.Time) error {
	return r.update(req.ID, until, func(e *pendingEntry) { e.settle = &req })
}

// reserveOf returns the store's request of id's reservation while the
// store has not answered it.
func (r *reconciler) reserveOf(id string) (tokenlimit.ReserveRequest, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.byID[id]; e != nil && e.reserve != nil {
		return *e.reserve, true
	}
	return tokenlimit.ReserveRequest{}, false
}

// reserved records that the store answered id's reservation; the entry
// goes when no settlement waits.
func (r *reconciler) reserved(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.byID[id]
	switch {
	case e == nil || e.reserve == nil:
	case e.settle == nil:
		delete(r.byID, id)
	default:
		r.byID[id] = &pendingEntry{settle: e.settle, until: e.until}
	}
}

// len returns the number of ids waiting.
func (r *reconciler) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

func (r *reconciler) snapshot() map[string]*pendingEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]*pendingEntry, len(r.byID))
	for id, e := range r.byID {
		out[id] = e
	}
	return out
}

// done removes id's entry once what e held was sent: if nothing was
// added since e was read (the entry is e, or what reserved left of it:
// e's settlement alone).
func (r *reconciler) done(id string, e *pendingEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.byID[id]
	if cur == e || (cur != nil && cur.reserve == nil && cur.settle == e.settle) {
		delete(r.byID, id)
	}
}

// storeAnswered is called after a store call succeeded: it starts sending
// what waits, unless that is under way or nothing waits.
func (f *Failover) storeAnswered() {
	if f.pending.len() == 0 || !f.pending.running.CompareAndSwap(false, true) {
		return
	}
	go f.drain()
}

// drain sends what waits to the store, the reservation before its
// settlement, one call each, until nothing is left or the store fails again
// (the next call that succeeds starts it again).
func (f *Failover) drain() {
	defer f.pending.running.Store(false)
	for id, e := range f.pending.snapshot() {
		if f.clock().After(e.until) {
			f.pending.done(id, e)
			f.log.Warn("dropping a fail-open reservation the store never answered in time", "id", id)
			continue
		}
		if e.reserve != nil && !f.reconcileReserve(context.Background(), *e.reserve) {
			return
		}
		if e.settle != nil {
			st, failed, err := f.settleRemote(context.Background(), *e.settle)
			if failed || err != nil {
				return
			}
			f.log.Info("fail-open settlement reconciled with the store", "id", id, "store", st.String())
		}
		f.pending.done(id, e)
	}
}

// reconcileReserve sends the store's request of a reservation taken
// locally; it reports false if the store failed (the request stays queued).
func (f *Failover) reconcileReserve(ctx context.Context, req tokenlimit.ReserveRequest) bool {
	var res *tokenlimit.Reservation
	failed, err := f.call(ctx, opReserve, func(ctx context.Context) error {
		var err error
		res, err = f.limiter.ReserveWith(ctx, req)
		return err
	})
	switch {
	case failed || ctx.Err() != nil:
		return false
	case err != nil: // the store answered, and cannot take it (full)
		f.log.Warn("reconciling a fail-open reservation with the store failed", "id", req.ID, "error", err)
	default:
		f.log.Info("fail-open reservation reconciled with the store", "id", req.ID, "store", res.Status().String())
	}
	f.pending.reserved(req.ID)
	return true
}
