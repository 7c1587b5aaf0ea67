package resilient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// DecideReservation reserves req's items, item i under policies[i], on the store or,
// while it fails, on the local budgets under the same id (the fail-open
// items at their shares; a fail-closed item makes the answer Unavailable),
// to be told to the store by id once it answers (reconcile.go). It sets
// results[i] for every item the answer covers, as Decide does, and returns
// the reservation when one was answered (FromStore, FromLocal and not
// Full); its status may be Conflict or Closed. Budgets recovering from an
// outage are charged their estimates on their local budgets first
// (hold.go); a settle goes to the store alone, so these local charges stay
// at the estimate, which only makes the recovery stricter.
func (f *Failover) DecideReservation(ctx context.Context, req tokenlimit.ReserveRequest, policies []Policy, results []tokenlimit.Result) (*tokenlimit.Reservation, Answer, error) {
	h, a, held := f.holdLocal(ctx, req.Items, policies, results)
	if held {
		return nil, a, nil
	}
	var res *tokenlimit.Reservation
	failed, err := f.call(ctx, opReserve, func(ctx context.Context) error {
		if err := f.writeBack(ctx, req.Items); err != nil {
			return err
		}
		var err error
		res, err = f.limiter.ReserveWith(ctx, req)
		return err
	})
	if err != nil || failed || res.Status() != tokenlimit.Reserved { // a replay charges nothing more
		f.release(h)
	}
	switch {
	case errors.Is(err, tokenlimit.ErrStoreFull):
		f.log.Debug("key space full: request refused", "store", "store", "error", err)
		return nil, Answer{At: f.clock(), Full: true}, nil
	case err != nil:
		return nil, Answer{}, err
	case failed:
		return f.failoverReserve(req, policies, results)
	}
	d := res.Decision()
	if res.Status().Admitted() || res.Status() == tokenlimit.Denied {
		for i, it := range req.Items {
			f.memory.Remember(it, policies[i], d.Results[i], d.At, f.clock)
		}
	}
	copy(results, d.Results)
	return res, Answer{At: d.At, Allowed: d.Allowed}, nil
}

// failoverReserve is failover for a reservation: the fail-open items are
// reserved on the local budgets under the same id (so that a settle finds
// it), at their shares.
func (f *Failover) failoverReserve(req tokenlimit.ReserveRequest, policies []Policy, results []tokenlimit.Result) (*tokenlimit.Reservation, Answer, error) {
	now := f.clock()
	if a, closed := unavailable(req.Items, policies, results, now); closed {
		return nil, a, nil
	}
	local := req
	local.Items = sharesOf(req.Items, policies)
	var res *tokenlimit.Reservation
	err := f.seed(local.Items, now)
	if err == nil {
		res, err = f.local.ReserveWith(context.Background(), local)
	}
	if errors.Is(err, tokenlimit.ErrStoreFull) {
		f.log.Debug("key space full: request refused", "store", "local", "error", err)
		return nil, Answer{At: now, Source: FromLocal, Full: true}, nil
	}
	if err == nil && (res.Status() == tokenlimit.Conflict || res.Status() == tokenlimit.Closed) {
		err = fmt.Errorf("reservation %q: %s on the local budgets", req.ID, res.Status())
	}
	if err != nil {
		f.log.Error("local fail-open reservation failed", "error", err)
		return nil, Answer{At: now, Source: Unavailable, Items: []int{}}, nil
	}
	d := res.Decision()
	if res.Status().Admitted() || res.Status() == tokenlimit.Denied {
		for i, it := range local.Items {
			f.memory.AnsweredLocally(it, policies[i], d.Results[i], d.At, now)
		}
	}
	if res.Status() == tokenlimit.Reserved { // a replay charges nothing more
		// The store learns of it by id (see reconciler): the reserve may
		// have reached it and been charged there already. Only when too
		// many wait is it written back as a plain fail-open charge.
		if f.pending.addReserve(req, now.Add(f.ttl)) != nil {
			for i, it := range local.Items {
				f.memory.Admitted(it, policies[i], d.Results[i], d.At, now)
			}
		}
	}
	copy(results, d.Results)
	return res, Answer{At: d.At, Allowed: d.Allowed, Source: FromLocal}, nil
}

// Settle settles req on the store, or on the local budgets when the
// reservation was taken there while the store failed (the settlement is
// then told to the store once it answers). It answers tokenlimit.Settled,
// AlreadySettled or UnknownReservation; while the store fails and the
// reservation is not local, it fails with ErrUnavailable (retrying is
// safe: settling applies once), and with ErrTooManyReservations when too
// many local settlements wait. req must be valid. It implements
// tokenlimit.Reserver: now is ignored, the layer settles at its Clock.
func (f *Failover) Settle(ctx context.Context, _ time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	if r, ok := f.pending.reserveOf(req.ID); ok && !f.reconcileReserve(ctx, r) {
		// Taken locally and still unknown to the store, which fails: a
		// settle there now would leave a tombstone the reservation could
		// not be recorded over.
		return f.settleLocalLater(req)
	}
	st, failed, err := f.settleRemote(ctx, req)
	switch {
	case err != nil:
		return 0, err
	case failed:
		return f.settleLocalLater(req)
	}
	if !f.localStore.Holds(req.ID, f.clock()) {
		return st, nil
	}
	if st == tokenlimit.UnknownReservation {
		// Taken on the local budget while the store failed, and the store
		// never got it (it now holds a tombstone, so a late copy charges
		// nothing): settle it here.
		return f.local.Settle(context.Background(), req)
	}
	// The reserve reached the store after all (its reply was late) and is
	// settled there: the local copy counted it twice.
	if _, err := f.local.Settle(context.Background(), tokenlimit.SettleRequest{ID: req.ID, Cancel: true}); err != nil {
		f.log.Error("cancelling a local fail-open reservation failed", "error", err)
	}
	return st, nil
}

// settleRemote settles on the store through the guard.
func (f *Failover) settleRemote(ctx context.Context, req tokenlimit.SettleRequest) (st tokenlimit.SettleStatus, failed bool, err error) {
	failed, err = f.call(ctx, opSettle, func(ctx context.Context) error {
		var err error
		st, err = f.limiter.Settle(ctx, req)
		return err
	})
	return st, failed, err
}

// settleLocalLater answers a settle while the store fails: a reservation
// held on the local budget is settled there, and the settlement is queued
// for the store (see reconciler); any other fails with ErrUnavailable.
func (f *Failover) settleLocalLater(req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	if !f.localStore.Holds(req.ID, f.clock()) {
		st, err := f.local.Settle(context.Background(), req)
		if err == nil && st == tokenlimit.AlreadySettled {
			return st, nil // settled here before; its settlement is queued
		}
		return 0, fmt.Errorf("settle %q: %w", req.ID, ErrUnavailable)
	}
	queued := req
	queued.Noted = nil // the caller's, written before this call returns only
	if err := f.pending.addSettle(queued, f.clock().Add(f.ttl)); err != nil {
		return 0, err
	}
	return f.local.Settle(context.Background(), req)
}
