package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// Reservation errors; test with errors.Is.
var (
	// ErrUnknownReservation: no reservation has that id, or it expired
	// (an expired reservation simply stands: nothing is refunded), or it was
	// denied (nothing to settle).
	ErrUnknownReservation = errors.New("unknown or expired reservation")
	// ErrTooManyReservations: Options.MaxReservations are held unsettled;
	// the reservation was not made. Settle some, or wait for them to expire.
	ErrTooManyReservations = errors.New("too many reservations held")
)

// reservations holds the reservations of this process by id, so that a
// retried reserve or settle never charges twice. Its lock is never held
// across a store call: a reservation being decided is visible (and waited
// for) by retries of the same id, and expiry is O(1) per reservation.
type reservations struct {
	now func() time.Time
	ttl time.Duration
	max int

	mu        sync.Mutex
	byID      map[string]*held
	order     []*held // by creation, hence by expiry while the clock goes forward
	unsettled int     // held reservations not yet settled: bounded by max
}

type held struct {
	id      string
	expires time.Time
	ready   chan struct{} // closed once decision (or err) is set

	decision Decision
	err      error                   // the reserve failed: the id is free again
	res      *tokenlimit.Reservation // nil when denied; on the local budget when decided while the store failed
	checks   []check

	open bool // counted in unsettled; guarded by the registry's lock

	mu      sync.Mutex // serializes settlements
	settled bool
}

func newReservations(now func() time.Time, ttl time.Duration, max int) *reservations {
	return &reservations{now: now, ttl: ttl, max: max, byID: map[string]*held{}}
}

// claim returns the reservation registered under id, or registers a new one
// that the caller must complete (fresh is true).
func (rs *reservations) claim(id string) (h *held, fresh bool, err error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.expire()
	if h, ok := rs.byID[id]; ok {
		return h, false, nil
	}
	if rs.unsettled >= rs.max {
		return nil, false, fmt.Errorf("%w: %d, the limit of Options.MaxReservations", ErrTooManyReservations, rs.max)
	}
	h = &held{id: id, expires: rs.now().Add(rs.ttl), ready: make(chan struct{}), open: true}
	rs.unsettled++
	rs.byID[id] = h
	rs.order = append(rs.order, h)
	return h, true, nil
}

func (rs *reservations) lookup(id string) (*held, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.expire()
	h, ok := rs.byID[id]
	return h, ok
}

// forget drops h (a reserve that failed or was denied: nothing is held), so
// the id can be tried again, and lets go of what it held.
func (rs *reservations) forget(h *held) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byID[h.id] == h {
		delete(rs.byID, h.id)
	}
	rs.close(h)
	h.checks, h.res = nil, nil
}

// settled marks h settled: it no longer counts against the bound, and stays
// only so that a repeated settle answers "already".
func (rs *reservations) settled(h *held) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.close(h)
}

// close stops counting h as unsettled. The caller holds rs.mu.
func (rs *reservations) close(h *held) {
	if h.open {
		h.open = false
		rs.unsettled--
	}
}

// expire drops the reservations past their TTL, oldest first. The caller
// holds rs.mu.
func (rs *reservations) expire() {
	now := rs.now()
	n := 0
	for ; n < len(rs.order) && now.After(rs.order[n].expires); n++ {
		h := rs.order[n]
		if rs.byID[h.id] == h {
			delete(rs.byID, h.id)
		}
		rs.close(h)
		rs.order[n] = nil
	}
	rs.order = rs.order[n:]
}

// wait waits until h is decided, or ctx ends.
func (h *held) wait(ctx context.Context) error {
	select {
	case <-h.ready:
		return h.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reserve checks reqs like Check and, if admitted, holds the charge under id
// until Settle says what it really cost. An empty id gets a random one. A
// second Reserve with the same id returns the first decision and charges
// nothing (waiting for the first if it is still being decided).
func (s *Service) Reserve(ctx context.Context, id string, reqs ...Request) (Decision, error) {
	if id == "" {
		id = newID()
	} else if len(id) > 128 {
		return Decision{}, invalid("id: at most 128 bytes, got %d", len(id))
	}
	h, fresh, err := s.reserves.claim(id)
	if err != nil {
		return Decision{}, err
	}
	if !fresh {
		if err := h.wait(ctx); err != nil {
			return Decision{}, err
		}
		return h.decision, nil
	}
	h.err = s.decideHeld(ctx, h, reqs)
	if h.err != nil || !h.decision.Allowed {
		s.reserves.forget(h) // only admitted charges are held
	}
	close(h.ready)
	return h.decision, h.err
}

// decideHeld reserves reqs on the store and records the outcome in h.
func (s *Service) decideHeld(ctx context.Context, h *held, reqs []Request) error {
	p, err := s.planFor(reqs, true)
	if err != nil {
		return err
	}
	h.checks = p.enforced
	h.decision, h.res, err = s.reserveChecks(ctx, p.enforced, h.id, time.Now())
	return err
}

// reserveChecks charges checks as estimates, all or nothing, on the store
// or, while it fails, on the local fail-open budget, and returns the
// decision (with id) and the reservation to settle: nil when denied, when
// unavailable, or when there is nothing to charge (admitted, as by Check).
// start is when the caller began, for the latency metric.
func (s *Service) reserveChecks(ctx context.Context, checks []check, id string, start time.Time) (Decision, *tokenlimit.Reservation, error) {
	if len(checks) == 0 {
		return Decision{Allowed: true, At: s.opts.Clock(), ReservationID: id}, nil, nil
	}
	td, res, failed, err := s.callStore(ctx, checks, true)
	var d Decision
	switch {
	case errors.Is(err, tokenlimit.ErrStoreFull):
		d = s.keySpaceFull(checks, "store", err)
	case err != nil:
		return Decision{}, nil, err
	case failed:
		d, res = s.failoverReserve(checks, true)
	default:
		d = Decision{Allowed: td.Allowed, At: td.At, Limits: outcomes(checks, td.Results, false)}
	}
	d.ReservationID = id
	s.metrics.observe(d, time.Since(start))
	return d, res, nil
}

// settleChecks settles res, reserved for checks, at the request's real cost
// actual and spend: each limit's cost of them as in Check, 0 for a
// concurrency slot (released), within the store timeout when the store is
// remote. A nil spend keeps what limits in usd were charged.
func (s *Service) settleChecks(ctx context.Context, res *tokenlimit.Reservation, checks []check, actual int64, spend *int64) error {
	actuals := make([]int64, len(checks))
	for i, c := range checks {
		switch {
		case c.limit.Concurrency:
		case c.limit.Cost.Spend && spend == nil:
			actuals[i] = c.item.Cost
		case c.limit.Cost.Spend:
			actuals[i] = *spend
		default:
			actuals[i] = c.limit.Cost.Of(c.descriptors, actual, 0)
		}
	}
	if s.store.Remote {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.StoreTimeout)
		defer cancel()
	}
	err := res.SettleEach(ctx, actuals)
	s.overLimit.forget(checks) // a refund may have reopened the budgets
	return err
}

// Settle tells what reservation id really cost: actual is the request's own
// cost (such as the LLM tokens used), turned into each limit's cost as in
// Check. The difference is refunded or charged atomically. Settling twice is
// harmless: the second call changes nothing and reports already=true.
func (s *Service) Settle(ctx context.Context, id string, actual int64) (already bool, err error) {
	if actual < 0 || actual > tokenlimit.MaxCost {
		return false, invalid("actual: must be between 0 and %d, got %d", int64(tokenlimit.MaxCost), actual)
	}
	h, ok := s.reserves.lookup(id)
	if !ok {
		return false, fmt.Errorf("reservation %q: %w", id, ErrUnknownReservation)
	}
	if err := h.wait(ctx); err != nil {
		if ctx.Err() != nil {
			return false, err
		}
		return false, fmt.Errorf("reservation %q: %w", id, ErrUnknownReservation) // its reserve failed
	}
	if !h.decision.Allowed { // denied while this settle waited: nothing is held
		return false, fmt.Errorf("reservation %q: %w", id, ErrUnknownReservation)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.settled:
		return true, nil
	case h.res == nil: // admitted with no limit to charge
		h.settled = true
		s.reserves.settled(h)
		return false, nil
	}
	if err := s.settleChecks(ctx, h.res, h.checks, actual, nil); err != nil {
		return false, err
	}
	h.settled = true
	s.reserves.settled(h)
	return false, nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
