package service

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// reconciler holds the settlements of reservations that were taken and
// settled on the local fail-open budget while the store failed. Each is
// sent to the store once it answers again: if the reserve reached the store
// after all (its reply was late), the store's record is settled to the real
// cost; if not, the settle leaves a tombstone there, so that a copy of the
// reserve still in flight charges nothing. An entry is dropped when the
// reservations' TTL has passed (the store's record, if any, has expired
// with it). The entries live in this process only: if it stops first, a
// late charge in the store stands as its estimate until its window passes.
type reconciler struct {
	max int

	mu   sync.Mutex
	byID map[string]pendingSettle

	running atomic.Bool // a drain is under way
}

type pendingSettle struct {
	req   tokenlimit.SettleRequest
	until time.Time
}

func newReconciler(max int) *reconciler {
	return &reconciler{max: max, byID: map[string]pendingSettle{}}
}

// add queues id's settlement; past max entries it fails with
// ErrTooManyReservations.
func (r *reconciler) add(req tokenlimit.SettleRequest, until time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byID[req.ID]; !ok && len(r.byID) >= r.max {
		return fmt.Errorf("%w: %d, the limit of Options.MaxReservations", ErrTooManyReservations, r.max)
	}
	r.byID[req.ID] = pendingSettle{req: req, until: until}
	return nil
}

// len returns the number of settlements waiting.
func (r *reconciler) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

func (r *reconciler) snapshot() map[string]pendingSettle {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]pendingSettle, len(r.byID))
	for id, p := range r.byID {
		out[id] = p
	}
	return out
}

func (r *reconciler) done(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byID, id)
}

// storeAnswered is called after a store call succeeded: it starts sending
// the waiting settlements, unless that is under way or there are none.
func (s *Service) storeAnswered() {
	if s.pending.len() == 0 || !s.pending.running.CompareAndSwap(false, true) {
		return
	}
	go s.drain()
}

// drain sends the waiting settlements to the store, one call each, until
// none is left or the store fails again (the next call that succeeds starts
// it again).
func (s *Service) drain() {
	defer s.pending.running.Store(false)
	for id, p := range s.pending.snapshot() {
		if s.opts.Clock().After(p.until) {
			s.pending.done(id)
			s.log.Warn("dropping a settlement the store never answered in time", "id", id)
			continue
		}
		st, failed, err := s.settleRemote(context.Background(), p.req)
		if failed || err != nil {
			return
		}
		s.pending.done(id)
		s.log.Info("fail-open settlement reconciled with the store", "id", id, "store", st.String())
	}
}
