package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// Reservation errors; test with errors.Is.
var (
	// ErrReservationConflict: the id already holds a reservation of a
	// different request. Nothing was charged and the first reservation is
	// untouched.
	ErrReservationConflict = errors.New("reservation id already holds a different request")
	// ErrReservationClosed: the id was settled before this reserve reached
	// the store (a reserve that arrived late, or an id reused after its
	// settle). Nothing was charged.
	ErrReservationClosed = errors.New("reservation id was already settled")
	// ErrStoreUnavailable: the store is failing and the call cannot be
	// answered without it (a settle of a reservation this process did not
	// take on its local fail-open budget). Nothing changed; retrying is
	// safe, since settling applies once.
	ErrStoreUnavailable = errors.New("the rate-limit store is unavailable")
	// ErrTooManyReservations: Options.MaxReservations settlements already
	// wait for the store to answer again; this one was not taken. Retry.
	ErrTooManyReservations = errors.New("too many settlements wait for the store")
)

// ReserveOptions configures ReserveWith.
type ReserveOptions struct {
	// ID names the reservation, at most 128 bytes; a random one when empty.
	// A retry with the same ID and request replays the first answer and
	// charges nothing; the same ID with another request fails with
	// ErrReservationConflict.
	ID string
	// Units, when not empty, keeps only the limits counting these units:
	// a request whose own cost is unknown (a passthrough the proxy cannot
	// count tokens of) reserves {Requests, InFlight}.
	Units []Unit
}

// Reserve checks reqs like Check and, if admitted, keeps the charges in the
// store under id until Settle says what the request really cost; any
// replica sharing the store can settle it. An empty id gets a random one.
// See ReserveWith.
func (s *Service) Reserve(ctx context.Context, id string, reqs ...Request) (Decision, error) {
	return s.ReserveWith(ctx, ReserveOptions{ID: id}, reqs...)
}

// ReserveWith is Reserve with options. The reservation is recorded in the
// store in the same atomic call that charges it, with Options.ReservationTTL:
// a repeated reserve (same id, same request) returns the recorded decision
// and charges nothing, even when the first reply was lost. While the store
// fails, the reservation is taken on the local fail-open budget under the
// same id (a fail-closed limit makes it Unavailable).
func (s *Service) ReserveWith(ctx context.Context, o ReserveOptions, reqs ...Request) (Decision, error) {
	ctx, span := s.startDecision(ctx, OpReserve)
	d, err := s.reserveWith(ctx, o, reqs)
	endDecision(span, &d, err)
	return d, err
}

func (s *Service) reserveWith(ctx context.Context, o ReserveOptions, reqs []Request) (Decision, error) {
	start := time.Now()
	id := o.ID
	if id == "" {
		id = tokenlimit.NewID()
	} else if len(id) > tokenlimit.MaxIDLength {
		return Decision{}, invalid("id: at most %d bytes, got %d", tokenlimit.MaxIDLength, len(id))
	}
	p, err := s.planFor(reqs, true)
	if err != nil {
		return Decision{}, err
	}
	checks := p.enforced
	if len(o.Units) > 0 {
		checks = slices.DeleteFunc(checks, func(c check) bool { return !slices.Contains(o.Units, unitOf(c.limit)) })
	}
	d, err := s.reserveChecks(ctx, id, checks)
	if err != nil {
		return Decision{}, err
	}
	d.ReservationID = id
	s.metrics.observe(d, time.Since(start))
	return d, nil
}

// reserveRequest is the store's request for reserving checks under id.
func (s *Service) reserveRequest(id string, checks []check) tokenlimit.ReserveRequest {
	rules := make([]tokenlimit.SettleRule, len(checks))
	for i, c := range checks {
		rules[i] = settleRule(c.limit)
	}
	return tokenlimit.ReserveRequest{ID: id, Items: items(checks), Rules: rules, TTL: s.opts.ReservationTTL}
}

// reserveChecks reserves checks under id on the store or, while it fails,
// on the local fail-open budget. Fail-open budgets recovering from an outage
// are charged their estimates on their local budgets first (recovery.go);
// a settle goes to the store alone, so these local charges stay at the
// estimate, which only makes the recovery stricter.
func (s *Service) reserveChecks(ctx context.Context, id string, checks []check) (Decision, error) {
	if len(checks) == 0 {
		return Decision{Allowed: true, At: s.opts.Clock()}, nil // nothing to charge, nothing recorded
	}
	h, hd, ok := s.holdLocal(ctx, checks)
	if !ok {
		return hd, nil
	}
	req := s.reserveRequest(id, checks)
	var res *tokenlimit.Reservation
	failed, err := s.call(ctx, opReserve, func(ctx context.Context) error {
		if err := s.writeBack(ctx, checks); err != nil {
			return err
		}
		var err error
		res, err = s.limiter.ReserveWith(ctx, req)
		return err
	})
	if err != nil || failed || res.Status() != tokenlimit.Reserved { // a replay charges nothing more
		s.release(h)
	}
	switch {
	case errors.Is(err, tokenlimit.ErrStoreFull):
		return s.keySpaceFull(checks, "store", err), nil
	case err != nil:
		return Decision{}, err
	case failed:
		return s.failoverReserve(checks, req), nil
	}
	if res.Status().Admitted() || res.Status() == tokenlimit.Denied {
		s.remember(checks, res.Decision().Results, res.Decision().At)
	}
	return reservationDecision(checks, res, false)
}

// reservationDecision turns a reservation into the service's answer.
func reservationDecision(checks []check, res *tokenlimit.Reservation, failOpen bool) (Decision, error) {
	switch res.Status() {
	case tokenlimit.Conflict:
		return Decision{}, fmt.Errorf("reservation %q: %w", res.ID(), ErrReservationConflict)
	case tokenlimit.Closed:
		return Decision{}, fmt.Errorf("reservation %q: %w", res.ID(), ErrReservationClosed)
	}
	td := res.Decision()
	return Decision{Allowed: td.Allowed, At: td.At, Limits: outcomes(checks, td.Results, failOpen),
		Reserved: res.OK(), Replayed: res.Status() == tokenlimit.Replayed}, nil
}

// Settle tells what reservation id really cost: actual is the request's own
// cost (such as the LLM tokens used), turned into each limit's cost as in
// Check: a token limit is set to actual, a per-request cost stays, a
// concurrency slot is released; the differences are applied atomically. It
// goes through the store's breaker and timeout like every call.
//
// It answers tokenlimit.Settled, tokenlimit.AlreadySettled (an earlier
// settle of id was applied; this one changed nothing), or
// tokenlimit.UnknownReservation (never reserved, denied, or expired: an
// unexpired estimate simply stands). A reservation taken on the local
// fail-open budget is settled there, and the store is told when it answers
// again (see docs/operations.md). When the store fails and the reservation
// is not local, it fails with ErrStoreUnavailable: retry, it applies once.
func (s *Service) Settle(ctx context.Context, id string, actual int64) (tokenlimit.SettleStatus, error) {
	return s.settle(ctx, id, actual, nil)
}

// settle is Settle with a spend for limits in usd (nil keeps their charge).
func (s *Service) settle(ctx context.Context, id string, actual int64, spend *int64) (tokenlimit.SettleStatus, error) {
	ctx, span := s.startDecision(ctx, OpSettle)
	st, err := s.settleUntraced(ctx, id, actual, spend)
	endSettle(span, st, err)
	return st, err
}

func (s *Service) settleUntraced(ctx context.Context, id string, actual int64, spend *int64) (tokenlimit.SettleStatus, error) {
	switch {
	case id == "":
		return 0, invalid("id: required")
	case len(id) > tokenlimit.MaxIDLength:
		return 0, invalid("id: at most %d bytes, got %d", tokenlimit.MaxIDLength, len(id))
	case actual < 0 || actual > tokenlimit.MaxCost:
		return 0, invalid("actual: must be between 0 and %d, got %d", int64(tokenlimit.MaxCost), actual)
	}
	req := tokenlimit.SettleRequest{ID: id, Actual: actual, Spend: spend}
	if r, ok := s.pending.reserveOf(id); ok && !s.reconcileReserve(ctx, r) {
		// Taken locally and still unknown to the store, which fails: a
		// settle there now would leave a tombstone the reservation could
		// not be recorded over.
		return s.settleLocalLater(req)
	}
	st, failed, err := s.settleRemote(ctx, req)
	switch {
	case err != nil:
		return 0, err
	case failed:
		return s.settleLocalLater(req)
	}
	if st == tokenlimit.Settled {
		// A refund may have reopened budgets whose denials this process
		// caches; which ones the record knows, not this process.
		s.overLimit.forgetRefundable()
	}
	if !s.localStore.Holds(id, s.opts.Clock()) {
		return st, nil
	}
	if st == tokenlimit.UnknownReservation {
		// Taken on the local budget while the store failed, and the store
		// never got it (it now holds a tombstone, so a late copy charges
		// nothing): settle it here.
		return s.local.SettleWith(context.Background(), req)
	}
	// The reserve reached the store after all (its reply was late) and is
	// settled there: the local copy counted it twice.
	if _, err := s.local.Cancel(context.Background(), id); err != nil {
		s.log.Error("cancelling a local fail-open reservation failed", "error", err)
	}
	return st, nil
}

// settleRemote settles on the store through the breaker and timeout.
func (s *Service) settleRemote(ctx context.Context, req tokenlimit.SettleRequest) (st tokenlimit.SettleStatus, failed bool, err error) {
	failed, err = s.call(ctx, opSettle, func(ctx context.Context) error {
		var err error
		st, err = s.limiter.SettleWith(ctx, req)
		return err
	})
	return st, failed, err
}

// settleLocalLater answers a settle while the store fails: a reservation
// held on the local budget is settled there, and the settlement is queued
// for the store (see reconciler); any other fails with ErrStoreUnavailable.
func (s *Service) settleLocalLater(req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	if !s.localStore.Holds(req.ID, s.opts.Clock()) {
		st, err := s.local.SettleWith(context.Background(), req)
		if err == nil && st == tokenlimit.AlreadySettled {
			return st, nil // settled here before; its settlement is queued
		}
		return 0, fmt.Errorf("settle %q: %w", req.ID, ErrStoreUnavailable)
	}
	if err := s.pending.addSettle(req, s.opts.Clock().Add(s.opts.ReservationTTL)); err != nil {
		return 0, err
	}
	return s.local.SettleWith(context.Background(), req)
}
