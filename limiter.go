package tokenlimit

import (
	"context"
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

// NewLimiter returns a limiter over store. It fails if store is nil.
func NewLimiter(store Store, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("tokenlimit: NewLimiter: store is nil")
	}
	l := &Limiter{store: store, now: time.Now}
	l.single.New = func() any { return new(singleCall) }
	for _, opt := range opts {
		opt(l)
	}
	if l.now == nil {
		return nil, errors.New("tokenlimit: NewLimiter: WithClock(nil)")
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
// argument ("key", "cost", or the limit's field such as "quota"). Use
// DecideN for the time of the decision too.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, cost int64) (Result, error) {
	r, _, err := l.DecideN(ctx, key, limit, cost)
	return r, err
}

// DecideN is AllowN that also returns the time the store decided at (the
// Redis server's clock in server-time mode), the ChargedAt of a later
// Adjustment of this charge and the base of Result's durations. It is zero
// when err is not nil.
func (l *Limiter) DecideN(ctx context.Context, key string, limit Limit, cost int64) (Result, time.Time, error) {
	call := l.single.Get().(*singleCall)
	call.items[0] = Item{Key: key, Limit: limit, Cost: cost}
	at, err := l.store.Check(ctx, l.now(), call.items[:], call.results[:])
	r := call.results[0]
	*call = singleCall{} // keep no key alive in the pool
	l.single.Put(call)
	if err != nil {
		return Result{}, time.Time{}, fmt.Errorf("tokenlimit: check: %w", unindexed(err))
	}
	return r, at, nil
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

// Reserve checks items like Check, charging each item's Cost as an estimate.
// When the request is admitted it also returns a Reservation with which to
// settle the real cost later; when denied the Reservation is nil.
func (l *Limiter) Reserve(ctx context.Context, items ...Item) (Decision, *Reservation, error) {
	d, err := l.Check(ctx, items...)
	if err != nil || !d.Allowed {
		return d, nil, err
	}
	return d, &Reservation{limiter: l, items: append([]Item(nil), items...), at: d.At}, nil
}

// Reservation is an admitted charge whose real cost is known later, such as
// an LLM call reserved at prompt + max tokens and settled at its reported
// usage. It is safe for concurrent use; it settles at most once.
type Reservation struct {
	limiter *Limiter
	items   []Item
	at      time.Time

	mu      sync.Mutex
	settled bool
}

// At is when the reservation was charged.
func (r *Reservation) At() time.Time { return r.at }

// Items returns the reserved items, with the estimated costs charged.
func (r *Reservation) Items() []Item { return append([]Item(nil), r.items...) }

// Settle sets the real cost of every item to actual, refunding or charging
// the difference from the estimate atomically across all items. An extra
// charge is taken even past the limit; a refund never lifts a budget above
// its capacity. A second call returns ErrSettled; a call that fails leaves
// the reservation unsettled so it can be retried.
func (r *Reservation) Settle(ctx context.Context, actual int64) error {
	actuals := make([]int64, len(r.items))
	for i := range actuals {
		actuals[i] = actual
	}
	return r.SettleEach(ctx, actuals)
}

// SettleEach is Settle with one real cost per item, in the items' order, for
// requests whose limits count different units (requests and tokens).
func (r *Reservation) SettleEach(ctx context.Context, actuals []int64) error {
	if len(actuals) != len(r.items) {
		return &FieldError{Field: "actuals", Reason: fmt.Sprintf("need one per item: %d items, %d actuals", len(r.items), len(actuals))}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return ErrSettled
	}
	var adjustments []Adjustment
	for i, it := range r.items {
		if actuals[i] < 0 {
			return &FieldError{Field: fmt.Sprintf("actuals[%d]", i), Reason: fmt.Sprintf("must not be negative, got %d", actuals[i])}
		}
		if delta := actuals[i] - it.Cost; delta != 0 {
			adjustments = append(adjustments, Adjustment{Key: it.Key, Limit: it.Limit, Delta: delta, ChargedAt: r.at})
		}
	}
	if len(adjustments) > 0 {
		if err := r.limiter.store.Adjust(ctx, r.limiter.now(), adjustments); err != nil {
			return fmt.Errorf("tokenlimit: settle: %w", err)
		}
	}
	r.settled = true
	return nil
}

// Cancel refunds the whole reservation: Settle(ctx, 0).
func (r *Reservation) Cancel(ctx context.Context) error {
	return r.Settle(ctx, 0)
}
