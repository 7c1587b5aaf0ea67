package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/resilient"
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
	ErrStoreUnavailable = resilient.ErrUnavailable
	// ErrTooManyReservations: Options.MaxReservations settlements already
	// wait for the store to answer again; this one was not taken. Retry.
	ErrTooManyReservations = resilient.ErrTooManyReservations
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
	// StopLimits, when set, keeps only the limits that stop a stream they
	// cannot pay for more of: enforced budgets in tokens or usd whose
	// on_exhaust is stop. The LLM proxy reserves a stream's growth on them.
	StopLimits bool
	// InProcess promises that this process settles the reservation, and
	// only through the Decision returned (SettleUsage, CancelReserved),
	// never by its id alone (Settle, Cancel, /v1/settle, another
	// replica): its leased limits (lease:) are then paid from this
	// replica's leases, as checks are, and only the rest is reserved in
	// the store, which makes no store call when every limit is leased.
	// Settled by id, such a reservation's leased limits keep their
	// estimates and the leases their charges (under-admission, never
	// more). A retry of the reserve pays the leased limits again. The
	// LLM proxy reserves so.
	InProcess bool
	// Cancel, when not nil, ends a wait under a limit's wait (see
	// Decision.Waited) once closed, as ctx's end does: for a caller that
	// decides on a context its client's leaving does not end (the LLM
	// proxy passes its client's).
	Cancel <-chan struct{}
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
	if o.StopLimits {
		checks = slices.DeleteFunc(checks, func(c check) bool { return !stopsStreams(c.limit) })
	}
	d, err := s.reserveChecks(ctx, id, checks, o.InProcess)
	took := time.Since(start) // the first decision's, without a wait
	// A stream's growth does not wait: it stops or finishes as on_exhaust says.
	if err == nil && !d.Allowed && !o.StopLimits {
		d, err = s.waitAndDecide(ctx, o.Cancel, requestWait(reqs), checks, d, func() (Decision, error) { return s.reserveChecks(ctx, id, checks, o.InProcess) })
	}
	if err != nil {
		return Decision{}, err
	}
	d.ReservationID = id
	s.metrics.observe(d, took)
	return d, nil
}

// reserveRequest is the store's request for reserving the call b under
// id, and the measures that settling it to its usage gives (see
// SettleUsage).
func (s *Service) reserveRequest(id string, b storeCall) (tokenlimit.ReserveRequest, []measure) {
	rules := make([]tokenlimit.SettleRule, len(b.checks))
	var measured []measure
	for i, c := range b.checks {
		rules[i], measured = settleRule(c, measured)
	}
	return tokenlimit.ReserveRequest{ID: id, Items: b.items, Rules: rules, TTL: s.opts.ReservationTTL, Notes: alertNotes(b.checks)}, measured
}

// reserveChecks reserves checks under id through the fault layer: on the
// store or, while it fails, on the local fail-open budgets
// (resilient.Failover.DecideReservation), and, for a reservation settled
// in process, its leased limits on this replica's leases
// (resilient.Failover.ReserveHeld).
func (s *Service) reserveChecks(ctx context.Context, id string, checks []check, inProcess bool) (Decision, error) {
	if len(checks) == 0 {
		return Decision{Allowed: true, At: s.opts.Clock()}, nil // nothing to charge, nothing recorded
	}
	b := newStoreCall(checks, false)
	req, measured := s.reserveRequest(id, b)
	var status tokenlimit.ReserveStatus // 0: refused before or without a reservation
	var held *resilient.Held
	var a resilient.Answer
	var err error
	if inProcess {
		held, a, err = s.fault.ReserveHeld(ctx, req, b.policies, b.results)
		if held != nil {
			status = held.Status()
		}
	} else {
		var res *tokenlimit.Reservation
		res, a, err = s.fault.DecideReservation(ctx, req, b.policies, b.results)
		if res != nil {
			status = res.Status()
		}
	}
	if err != nil {
		return Decision{}, s.storeError(err)
	}
	d := s.decision(a, b)
	switch status {
	case 0:
		return d, nil
	case tokenlimit.Conflict:
		return Decision{}, fmt.Errorf("reservation %q: %w", id, ErrReservationConflict)
	case tokenlimit.Closed:
		return Decision{}, fmt.Errorf("reservation %q: %w", id, ErrReservationClosed)
	}
	d.Reserved, d.Replayed, d.measured = status.Admitted(), status == tokenlimit.Replayed, measured
	if d.Reserved {
		d.held = held
	}
	if d.Reserved && !d.Replayed && d.Allowed && a.Source == resilient.FromStore && !a.Full {
		s.raiseAlerts(ctx, checks, &d) // the estimate charged crossed them
	}
	return d, nil
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
	return s.settle(ctx, nil, id, actual, nil, nil)
}

// settle is Settle with a spend for limits in usd (nil keeps their charge)
// and the measures of limits counting token classes (see SettleUsage),
// through held when the reservation was made to be settled in process.
func (s *Service) settle(ctx context.Context, held *resilient.Held, id string, actual int64, spend *int64, measures []int64) (tokenlimit.SettleStatus, error) {
	ctx, span := s.startDecision(ctx, OpSettle)
	st, err := s.settleUntraced(ctx, held, id, actual, spend, measures)
	endSettle(span, st, err)
	return st, err
}

func (s *Service) settleUntraced(ctx context.Context, held *resilient.Held, id string, actual int64, spend *int64, measures []int64) (tokenlimit.SettleStatus, error) {
	if err := validID(id); err != nil {
		return 0, err
	}
	if actual < 0 || actual > tokenlimit.MaxCost {
		return 0, invalid("actual: must be between 0 and %d, got %d", int64(tokenlimit.MaxCost), actual)
	}
	return s.settleRequest(ctx, held, tokenlimit.SettleRequest{ID: id, Actual: actual, Spend: spend, Measures: measures})
}

// Cancel settles reservation id as if its request never happened: every
// limit's whole charge is refunded, whatever it counts (the LLM proxy
// refunds a stream's growths so). The once-only rules of Settle apply.
func (s *Service) Cancel(ctx context.Context, id string) (tokenlimit.SettleStatus, error) {
	return s.cancel(ctx, nil, id)
}

// CancelReserved is Cancel for d, a reservation made by this process:
// one reserved with ReserveOptions.InProcess gives what its leased limits
// paid back to the leases.
func (s *Service) CancelReserved(ctx context.Context, d Decision) (tokenlimit.SettleStatus, error) {
	return s.cancel(ctx, d.held, d.ReservationID)
}

func (s *Service) cancel(ctx context.Context, held *resilient.Held, id string) (tokenlimit.SettleStatus, error) {
	ctx, span := s.startDecision(ctx, OpSettle)
	var st tokenlimit.SettleStatus
	err := validID(id)
	if err == nil {
		st, err = s.settleRequest(ctx, held, tokenlimit.SettleRequest{ID: id, Cancel: true})
	}
	endSettle(span, st, err)
	return st, err
}

// validID reports whether id can name a reservation.
func validID(id string) error {
	switch {
	case id == "":
		return invalid("id: required")
	case len(id) > tokenlimit.MaxIDLength:
		return invalid("id: at most %d bytes, got %d", tokenlimit.MaxIDLength, len(id))
	}
	return nil
}

// settleRequest applies a valid settlement, and raises the alerts of the
// budgets it moved past a threshold (their notes come back from the
// reservation's record, whichever replica reserved it).
func (s *Service) settleRequest(ctx context.Context, held *resilient.Held, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	var noted []tokenlimit.Noted
	req.Noted = &noted
	var st tokenlimit.SettleStatus
	var err error
	if held != nil {
		st, err = s.fault.SettleHeld(ctx, held, req)
	} else {
		st, err = s.fault.Settle(ctx, s.opts.Clock(), req)
	}
	if err != nil {
		return 0, s.storeError(err)
	}
	if st == tokenlimit.Settled {
		// A refund may have reopened budgets whose denials this process
		// caches; which ones the record knows, not this process.
		s.overLimit.forgetRefundable()
		if len(noted) > 0 && !req.Cancel { // a cancellation only refunds
			s.alertsAfterSettle(ctx, noted)
		}
	}
	return st, nil
}
