package tokenlimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Limiter decides requests against a Store at the time its clock tells. It is
// safe for concurrent use. The zero value is not usable; call NewLimiter.
type Limiter struct {
	store Store
	now   func() time.Time
	timer func(time.Duration) (<-chan time.Time, func() bool)
	ttl   time.Duration
	// single recycles the one-item slices of AllowN, which escape through
	// the Store interface and would otherwise cost two allocations a call.
	single sync.Pool
}

type singleCall struct {
	items   [1]Item
	results [1]Result
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock makes the limiter read time from now instead of time.Now; tests
// pass a fake clock. A Redis store in server-time mode ignores it and uses
// the Redis server's clock.
func WithClock(now func() time.Time) Option {
	return func(l *Limiter) { l.now = now }
}

// WithTimer makes WaitN sleep on timer instead of time.NewTimer: a channel
// that receives once d has passed on the limiter's clock, and a function
// that stops it. Tests pass a fake clock's, with WithClock.
func WithTimer(timer func(d time.Duration) (c <-chan time.Time, stop func() bool)) Option {
	return func(l *Limiter) { l.timer = timer }
}

// NewLimiter returns a limiter over store. It fails if store is nil.
func NewLimiter(store Store, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("tokenlimit: NewLimiter: store is nil")
	}
	l := &Limiter{store: store, now: time.Now, timer: newTimer, ttl: DefaultReservationTTL}
	l.single.New = func() any { return new(singleCall) }
	for _, opt := range opts {
		opt(l)
	}
	if l.now == nil {
		return nil, errors.New("tokenlimit: NewLimiter: WithClock(nil)")
	}
	if l.timer == nil {
		return nil, errors.New("tokenlimit: NewLimiter: WithTimer(nil)")
	}
	if err := validateTTL(l.ttl); err != nil {
		return nil, fmt.Errorf("tokenlimit: NewLimiter: WithReservationTTL: %w", err)
	}
	return l, nil
}

// Decision is the answer for a request checked against one or more limits.
type Decision struct {
	// Allowed reports whether every limit admitted the request; only then was
	// anything charged.
	Allowed bool
	// At is the time the store decided at (the Redis server's clock in
	// server-time mode). Adjustments of this charge refer to it.
	At time.Time
	// Results holds one Result per item, in the items' order.
	Results []Result
}

// Tightest returns the index of the result that constrains the request most,
// the one to report in rate-limit headers: when denied, a cost that can never
// fit, else the longest RetryAfter; when allowed, the least Remaining (the
// longer ResetAfter breaks ties). It returns -1 for no results.
func (d Decision) Tightest() int {
	best := -1
	for i, r := range d.Results {
		if best < 0 || tighter(r, d.Results[best]) {
			best = i
		}
	}
	return best
}

func tighter(a, b Result) bool {
	switch {
	case a.Allowed != b.Allowed:
		return !a.Allowed
	case a.CostExceedsLimit != b.CostExceedsLimit:
		return a.CostExceedsLimit
	case !a.Allowed && a.RetryAfter != b.RetryAfter:
		return a.RetryAfter > b.RetryAfter
	case a.Remaining != b.Remaining:
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
}

// Allow charges 1 to key's budget under limit if it fits. Being over the limit
// is reported in the Result, not as an error.
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN charges cost to key's budget under limit if it fits; cost 0 only
// reports the budget's state. An invalid input is a *FieldError naming the
// argument ("key", "cost", or the limit's field such as "quota"). For the
// time the store decided at as well (the base of Result's durations, the
// Redis server's clock in server-time mode), use Check: Decision.At.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, cost int64) (Result, error) {
	call := l.single.Get().(*singleCall)
	call.items[0] = Item{Key: key, Limit: limit, Cost: cost}
	_, err := l.store.Check(ctx, l.now(), call.items[:], call.results[:])
	r := call.results[0]
	*call = singleCall{} // keep no key alive in the pool
	l.single.Put(call)
	if err != nil {
		return Result{}, fmt.Errorf("tokenlimit: check: %w", unindexed(err))
	}
	return r, nil
}

// unindexed renames a store's "items[0].<field>" error as the caller's
// argument "<field>": a single-item call has no list of items.
func unindexed(err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		if field, ok := strings.CutPrefix(fe.Field, "items[0]."); ok {
			return &FieldError{Field: field, Reason: fe.Reason}
		}
	}
	return err
}

// Check decides a request against every item at once, all or nothing: each
// item's cost is charged only if every item admits it.
func (l *Limiter) Check(ctx context.Context, items ...Item) (Decision, error) {
	results := make([]Result, len(items))
	at, err := l.store.Check(ctx, l.now(), items, results)
	if err != nil {
		return Decision{}, fmt.Errorf("tokenlimit: check: %w", err)
	}
	return Decision{Allowed: allAllowed(results), At: at, Results: results}, nil
}

func allAllowed(results []Result) bool {
	for _, r := range results {
		if !r.Allowed {
			return false
		}
	}
	return true
}

// DefaultReservationTTL is how long a Limiter's reservations can be settled
// unless WithReservationTTL says otherwise.
const DefaultReservationTTL = 10 * time.Minute

// WithReservationTTL sets how long a reservation made through the limiter
// is recorded: until then it can be settled, after it an unsettled estimate
// simply stands. It must be 1ms..MaxPeriod.
func WithReservationTTL(ttl time.Duration) Option {
	return func(l *Limiter) { l.ttl = ttl }
}

// Reserve checks items like Check, charging each item's Cost as an
// estimate, and records the reservation in the store under a random id, so
// that the real cost can be settled later, from this process or any other
// client of the store (Limiter.Settle with Reservation.ID). Every item
// settles to the actual cost given to Settle.
//
// The Reservation is never nil when err is nil; OK reports whether it holds
// a charge. Settling one that does not is harmless and does nothing. A store
// that is not a Reserver keeps no reservations: Reserve and Settle over it
// fail with an error matching ErrUnsupported.
func (l *Limiter) Reserve(ctx context.Context, items ...Item) (*Reservation, error) {
	return l.ReserveWith(ctx, ReserveRequest{ID: NewID(), Items: items})
}

// ReserveWith is Reserve with the caller's id, rules and TTL (the
// limiter's when req.TTL is zero). The same id and request again replays
// the first answer and charges nothing (Status Replayed), which makes a
// reserve safe to retry; the same id with another request charges nothing
// (Conflict).
func (l *Limiter) ReserveWith(ctx context.Context, req ReserveRequest) (*Reservation, error) {
	if req.TTL == 0 {
		req.TTL = l.ttl
	}
	req.Items = append([]Item(nil), req.Items...)
	r := &Reservation{limiter: l, req: req, results: make([]Result, len(req.Items))}
	rs, err := l.reserver()
	if err != nil {
		r.results = nil
		return r, fmt.Errorf("tokenlimit: reserve: %w", err)
	}
	out, err := rs.Reserve(ctx, l.now(), req, r.results)
	if err != nil {
		r.results = nil
		return r, fmt.Errorf("tokenlimit: reserve: %w", err)
	}
	r.out = out
	return r, nil
}

// Settle applies req to the reservation recorded under req.ID, from this
// process or any other client of the store, whichever made the reservation:
// each item is set to its settled cost (req.Actual, req.Spend or a measure,
// by the item's rule; nothing when req.Cancel), as Reservation.Settle
// describes. A zero req.TTL is the limiter's. It is the one way to settle by
// id; a Reservation's Settle and Cancel settle the handle in hand.
func (l *Limiter) Settle(ctx context.Context, req SettleRequest) (SettleStatus, error) {
	if req.TTL == 0 {
		req.TTL = l.ttl
	}
	return l.settle(ctx, req)
}

func (l *Limiter) settle(ctx context.Context, req SettleRequest) (SettleStatus, error) {
	rs, err := l.reserver()
	if err != nil {
		return 0, fmt.Errorf("tokenlimit: settle: %w", err)
	}
	st, err := rs.Settle(ctx, l.now(), req)
	if err != nil {
		return 0, fmt.Errorf("tokenlimit: settle: %w", err)
	}
	return st, nil
}

// reserver returns the limiter's store as a Reserver, or an error matching
// ErrUnsupported if it keeps no reservations.
func (l *Limiter) reserver() (Reserver, error) {
	if rs, ok := l.store.(Reserver); ok {
		return rs, nil
	}
	return nil, fmt.Errorf("store %q keeps no reservations (it is not a tokenlimit.Reserver): %w", Describe(l.store).Name, ErrUnsupported)
}

// Reservation is a request checked with Reserve, whose real cost is known
// later, such as an LLM call reserved at prompt + max tokens and settled at
// its reported usage. It lives in the store under ID; this value is only a
// handle, safe for concurrent use, and its methods never panic.
type Reservation struct {
	limiter *Limiter
	req     ReserveRequest
	out     ReserveOutcome
	results []Result
}

// ID is the reservation's id in the store.
func (r *Reservation) ID() string { return r.req.ID }

// OK reports whether the reservation holds a charge to settle: the request
// was admitted now (Reserved) or by an earlier reserve of the same id and
// request (Replayed).
func (r *Reservation) OK() bool { return r.out.Status.Admitted() }

// Status is what the store did with the reservation; 0 if it failed.
func (r *Reservation) Status() ReserveStatus { return r.out.Status }

// Decision is the check's answer: allowed only when OK, at the time the
// reservation was charged (zero if it failed).
func (r *Reservation) Decision() Decision {
	return Decision{Allowed: r.OK(), At: r.out.At, Results: append([]Result(nil), r.results...)}
}

// Items returns the reserved items, with the estimated costs charged.
func (r *Reservation) Items() []Item { return append([]Item(nil), r.req.Items...) }

// Settle sets the real cost of every item to actual, 0..MaxCost, refunding
// or charging the difference from the estimate atomically across all items
// (the items' rules apply when reserved with ReserveWith). An extra charge
// is taken even past the limit; a refund never lifts a budget above its
// capacity. Settling again changes nothing and answers AlreadySettled; a
// call that fails (the store is down) can be retried, and applies once. A
// reservation that is not OK answers UnknownReservation without a store
// call.
func (r *Reservation) Settle(ctx context.Context, actual int64) (SettleStatus, error) {
	return r.settle(ctx, SettleRequest{ID: r.req.ID, Actual: actual, TTL: r.req.TTL})
}

// Cancel refunds every item's whole charge, whatever its rule, as if the
// request never happened; like Settle otherwise.
func (r *Reservation) Cancel(ctx context.Context) (SettleStatus, error) {
	return r.settle(ctx, SettleRequest{ID: r.req.ID, Cancel: true, TTL: r.req.TTL})
}

func (r *Reservation) settle(ctx context.Context, req SettleRequest) (SettleStatus, error) {
	if !r.OK() {
		if err := req.Validate(); err != nil {
			return 0, fmt.Errorf("tokenlimit: settle: %w", err)
		}
		return UnknownReservation, nil
	}
	return r.limiter.settle(ctx, req)
}

// NewID returns a random reservation id: 32 hex digits.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
