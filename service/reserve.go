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
	// (an expired reservation simply stands: nothing is refunded).
	ErrUnknownReservation = errors.New("unknown or expired reservation")
)

// reservations holds the reservations of this process by id, so that a
// retried reserve or settle never charges twice.
type reservations struct {
	now func() time.Time
	ttl time.Duration

	mu   sync.Mutex
	byID map[string]*held
}

type held struct {
	decision Decision
	res      *tokenlimit.Reservation // nil when denied or decided while the store failed
	checks   []check
	expires  time.Time
	settled  bool
}

func newReservations(now func() time.Time, ttl time.Duration) *reservations {
	return &reservations{now: now, ttl: ttl, byID: map[string]*held{}}
}

// Reserve checks reqs like Check and, if admitted, holds the charge under id
// until Settle says what it really cost. An empty id gets a random one. A
// second Reserve with the same id returns the first decision and charges
// nothing.
func (s *Service) Reserve(ctx context.Context, id string, reqs ...Request) (Decision, error) {
	if id == "" {
		id = newID()
	} else if len(id) > 128 {
		return Decision{}, invalid("id: at most 128 bytes, got %d", len(id))
	}
	rs := s.reserves
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.expire()
	if h, ok := rs.byID[id]; ok {
		return h.decision, nil
	}
	p, err := s.planFor(reqs, true)
	if err != nil {
		return Decision{}, err
	}
	h := &held{checks: p.enforced, expires: rs.now().Add(rs.ttl)}
	td, res, failed, err := s.callStore(ctx, p.enforced, true)
	switch {
	case err != nil:
		return Decision{}, err
	case failed:
		h.decision = s.failover(p.enforced)
	default:
		h.decision = Decision{Allowed: td.Allowed, At: td.At, Limits: outcomes(p.enforced, td.Results, false)}
		h.res = res
	}
	h.decision.ReservationID = id
	rs.byID[id] = h
	s.metrics.observe(h.decision, 0)
	return h.decision, nil
}

// Settle tells what reservation id really cost: actual is the request's own
// cost (such as the LLM tokens used), turned into each limit's cost as in
// Check. The difference is refunded or charged atomically. Settling twice is
// harmless: the second call changes nothing and reports already=true.
func (s *Service) Settle(ctx context.Context, id string, actual int64) (already bool, err error) {
	if actual < 0 || actual > tokenlimit.MaxCost {
		return false, invalid("actual: must be between 0 and %d, got %d", int64(tokenlimit.MaxCost), actual)
	}
	rs := s.reserves
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.expire()
	h, ok := rs.byID[id]
	if !ok {
		return false, fmt.Errorf("reservation %q: %w", id, ErrUnknownReservation)
	}
	switch {
	case h.res == nil: // denied, or decided locally while the store failed
		return false, nil
	case h.settled:
		return true, nil
	}
	actuals := make([]int64, len(h.checks))
	for i, c := range h.checks {
		if !c.limit.Concurrency { // a concurrency slot is released: 0
			actuals[i] = c.limit.Cost.Of(c.descriptors, actual)
		}
	}
	if err := h.res.SettleEach(ctx, actuals); err != nil {
		return false, err
	}
	h.settled = true
	return false, nil
}

// expire drops reservations past their TTL. The caller holds rs.mu.
func (rs *reservations) expire() {
	now := rs.now()
	for id, h := range rs.byID {
		if now.After(h.expires) {
			delete(rs.byID, id)
		}
	}
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
