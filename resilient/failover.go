package resilient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// This file is the fault layer's one entry: Failover decides every store
// call of the service, each item under its Policy, on the store while it
// answers and on local budgets while it fails. A call goes through these
// steps, each in one place:
//
//  0. leased items (Policy.Lease) are paid from this replica's leases of
//     their budgets (leasedecide.go, leases.go; a reservation's when it is
//     settled in process, leasereserve.go); only the rest goes on;
//  1. the recovery hold (hold.go): budgets recovering from an outage are
//     charged on their local budgets first (budget.go's Recovering);
//  2. the store call through Store (deadline and breaker), preceded by the
//     write-back of what was admitted locally during an outage;
//  3. on a store failure, the failover: a fail-closed item makes the answer
//     Unavailable, fail-open items are decided on local budgets seeded from
//     the store's last answers (failopen.go);
//  4. reservations taken locally are told to the store by id once it
//     answers (reconcile.go).

// FailoverOptions configures a Failover. Zero values take the defaults
// documented on each field.
type FailoverOptions struct {
	// Options configures the store's deadline and breaker; its Clock is
	// the time of every decision.
	Options
	// ReservationTTL is how long a reservation is recorded; 10 minutes
	// when 0.
	ReservationTTL time.Duration
	// LocalMaxKeys bounds the keys of the local budgets; 100,000 when 0.
	LocalMaxKeys int
	// MaxReservations bounds the local reservations waiting to be told to
	// the store; 100,000 when 0.
	MaxReservations int
	// FailOpenKeys bounds the budgets whose last store answer is
	// remembered; 100,000 when 0.
	FailOpenKeys int
	// Recovery is how long a budget decided locally keeps to its local
	// budget once the store answers again (Budget); 10s when 0.
	Recovery time.Duration
	// Logger receives the layer's logs; slog.Default() when nil.
	Logger *slog.Logger
	// Observer is told what the layer does, for metrics; zero: nothing.
	Observer Observer
	// Policy is what every item does when the layer is used as a
	// tokenlimit.Store (storeview.go); the zero value fails closed.
	Policy Policy
	// LeaseKeys bounds the budgets holding leases (Policy.Lease); calls
	// of other budgets are decided on the store. 100,000 when 0.
	LeaseKeys int
	// AfterFunc runs fn once d has passed on Options.Clock, and returns a
	// function that stops it: the timers of leases. time.AfterFunc when
	// nil; tests with a fake clock pass theirs.
	AfterFunc func(d time.Duration, fn func()) (stop func() bool)
}

// Observer receives the layer's events. Nil fields are skipped. The
// functions are called on the decision's path: they must be quick.
type Observer struct {
	// StoreFailed: a store call of op failed ("check", "reserve",
	// "settle", "lease").
	StoreFailed func(op string)
	// OutcomeUnknown: a check failed or was given up after it was sent:
	// the store may have applied it.
	OutcomeUnknown func()
	// Writeback: cost admitted locally for limit was written back
	// (WritebackOK), kept after a failed write (WritebackFailed) or
	// dropped (WritebackExpired, WritebackEvicted).
	Writeback func(limit, result string, cost int64)
	// Lease: a lease of limit was taken, denied, failed, returned or
	// left standing (LeaseEvent), of amount.
	Lease func(limit string, event LeaseEvent, amount int64)
}

// Source says who answered a Failover call.
type Source uint8

// The sources.
const (
	// FromStore: the store answered every item.
	FromStore Source = iota
	// FromLocal: the store failed and every item is fail-open: each was
	// decided on its local budget, at its share of the limit.
	FromLocal
	// HeldLocal: budgets recovering from an outage were denied by their
	// local budgets (Answer.Items) before the store was asked.
	HeldLocal
	// Unavailable: the store failed and fail-closed items (Answer.Items)
	// cannot be decided without it: the request is refused.
	Unavailable
	// FromLease: every item was paid from this replica's leases
	// (Policy.Lease); the store was not asked.
	FromLease
)

// String names the source.
func (s Source) String() string {
	return [...]string{"store", "local", "held-local", "unavailable", "lease"}[s]
}

// Answer is a Failover decision.
type Answer struct {
	// At is the decision's time.
	At time.Time
	// Allowed is true when every answered item admits the request.
	Allowed bool
	// Source says who answered.
	Source Source
	// Full is true when the store (FromStore) or the local budgets
	// (FromLocal) had no room for a new key: nothing was charged.
	Full bool
	// Items are the indexes of the items answered when not every item is
	// (HeldLocal, Unavailable: the sources say which); nil when every item
	// is. The results of the others are not set.
	Items []int
	// Local, in an admitting answer of a call spanning stores (Stores)
	// where some stores answered and others failed over (FromLocal), are
	// the indexes of the items decided on local budgets; nil when Source
	// says it of every item.
	Local []int
}

// ErrTooManyReservations: FailoverOptions.MaxReservations settlements
// already wait for the store to answer again; this one was not taken.
var ErrTooManyReservations = errors.New("too many settlements wait for the store")

// Failover is the fault layer: a store with a deadline and a breaker
// (Store), local budgets for fail-open items while it fails, the memory
// that seeds them and writes back what they admitted (FailOpen), the
// recovery hold (hold.go), the reconciling of local reservations
// (reconcile.go) and the leases of leased budgets (leases.go; Close
// returns them). It is safe for concurrent use.
type Failover struct {
	store      tokenlimit.Store
	info       tokenlimit.StoreInfo
	guard      *Store
	limiter    *tokenlimit.Limiter // reservations on store
	local      *tokenlimit.Limiter // the local budgets
	localStore *memstore.Store     // local's store
	memory     *FailOpen
	pending    *reconciler
	clock      func() time.Time
	ttl        time.Duration
	log        *slog.Logger
	observer   Observer
	policy     Policy  // FailoverOptions.Policy
	leases     *leases // nil when the store keeps no reservations
}

// NewFailover returns the fault layer over store.
func NewFailover(store tokenlimit.Store, opts FailoverOptions) (*Failover, error) {
	if p := opts.Policy; p.Open && (p.Share <= 0 || p.Share > 1) {
		return nil, fmt.Errorf("resilient: NewFailover: Policy.Share must be in (0, 1] for an open policy, got %v", p.Share)
	}
	if l := opts.Policy.Lease; l.On() && (l.TTL < time.Millisecond || l.TTL > tokenlimit.MaxPeriod) {
		return nil, fmt.Errorf("resilient: NewFailover: Policy.Lease.TTL must be 1ms..%s, got %s", tokenlimit.MaxPeriod, l.TTL)
	}
	opts = withFailoverDefaults(opts)
	guard, err := New(store, opts.Options)
	if err != nil {
		return nil, err
	}
	f := &Failover{store: store, info: guard.info, guard: guard, clock: guard.clock, ttl: opts.ReservationTTL,
		log: opts.Logger, observer: opts.Observer, policy: opts.Policy, pending: newReconciler(opts.MaxReservations)}
	if f.localStore, err = memstore.New(memstore.Options{MaxKeys: opts.LocalMaxKeys}); err != nil {
		return nil, fmt.Errorf("resilient: local budgets: %w", err)
	}
	lopts := []tokenlimit.Option{tokenlimit.WithClock(f.clock), tokenlimit.WithReservationTTL(opts.ReservationTTL)}
	if f.local, err = tokenlimit.NewLimiter(f.localStore, lopts...); err != nil {
		return nil, fmt.Errorf("resilient: %w", err)
	}
	if f.limiter, err = tokenlimit.NewLimiter(store, lopts...); err != nil {
		return nil, fmt.Errorf("resilient: %w", err)
	}
	f.memory = NewFailOpen(opts.FailOpenKeys, opts.Recovery, opts.Observer.Writeback)
	if _, ok := store.(tokenlimit.Reserver); ok {
		f.leases = newLeases(f, opts.LeaseKeys, opts.AfterFunc)
	}
	return f, nil
}

// The defaults of FailoverOptions.
const (
	DefaultReservationTTL = 10 * time.Minute
	DefaultBound          = 100_000 // LocalMaxKeys, MaxReservations, FailOpenKeys
	DefaultRecovery       = 10 * time.Second
)

func withFailoverDefaults(o FailoverOptions) FailoverOptions {
	o.Options = withDefaults(o.Options)
	if o.ReservationTTL == 0 {
		o.ReservationTTL = DefaultReservationTTL
	}
	for _, n := range []*int{&o.LocalMaxKeys, &o.MaxReservations, &o.FailOpenKeys, &o.LeaseKeys} {
		if *n == 0 {
			*n = DefaultBound
		}
	}
	if o.Recovery == 0 {
		o.Recovery = DefaultRecovery
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.AfterFunc == nil {
		o.AfterFunc = func(d time.Duration, fn func()) func() bool { return time.AfterFunc(d, fn).Stop }
	}
	return o
}

// Guard returns the store with its deadline and breaker, for health and
// gauges.
func (f *Failover) Guard() *Store { return f.guard }

// LocalKeys returns the keys the local budgets hold and their bound.
func (f *Failover) LocalKeys() (keys, maxKeys int) { return f.localStore.Len(), f.localStore.MaxKeys() }

// PendingReservations returns how many local reservations wait to be told
// to the store.
func (f *Failover) PendingReservations() int { return f.pending.len() }

// Health is the store's health (Store.Health); a probe that the store
// answered starts reconciling what waits for it.
func (f *Failover) Health(ctx context.Context) Health {
	h, probed := f.guard.Health(ctx)
	if probed {
		f.storeAnswered()
	}
	return h
}

// Decide decides items, item i under policies[i], at the clock's time, and
// sets results[i] for every item the answer covers (Answer.Items). The
// error is an invalid request (matching tokenlimit.ErrInvalid) or the
// caller's context error when it gave up; a store failure is an answer
// (FromLocal, Unavailable), and so is a full store (Answer.Full).
func (f *Failover) Decide(ctx context.Context, items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result) (Answer, error) {
	if f.leases != nil && anyLeased(policies) {
		return f.decideLeased(ctx, items, policies, results)
	}
	return f.decide(ctx, items, policies, results)
}

// decide is Decide without leases.
func (f *Failover) decide(ctx context.Context, items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result) (Answer, error) {
	h, a, held := f.holdLocal(ctx, items, policies, results)
	if held {
		return a, nil
	}
	at, failed, err := f.checkStore(ctx, items, policies, results)
	if err != nil || failed || !allAllowed(results) {
		f.release(h)
	}
	switch {
	case errors.Is(err, tokenlimit.ErrStoreFull):
		f.log.Debug("key space full: request refused", "store", "store", "error", err)
		return Answer{At: f.clock(), Full: true}, nil
	case err != nil:
		return Answer{}, err
	case failed:
		return f.failover(items, policies, results), nil
	}
	return Answer{At: at, Allowed: allAllowed(results)}, nil
}

// checkStore checks items on the store through the guard, the write-back
// of what their budgets admitted locally first. failed reports a store
// failure; err is an invalid request, a full store or the caller's
// context error.
func (f *Failover) checkStore(ctx context.Context, items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result) (at time.Time, failed bool, err error) {
	failed, err = f.call(ctx, opCheck, func(ctx context.Context) error {
		if err := f.writeBack(ctx, items); err != nil {
			return err
		}
		var err error
		at, err = f.store.Check(ctx, f.clock(), items, results)
		if err != nil {
			return fmt.Errorf("tokenlimit: check: %w", err)
		}
		return nil
	})
	if !failed && err == nil {
		for i, it := range items {
			f.memory.Remember(it, policies[i], results[i], at, f.clock)
		}
	}
	return at, failed, err
}

func allAllowed(results []tokenlimit.Result) bool {
	for _, r := range results {
		if !r.Allowed {
			return false
		}
	}
	return true
}

// The store operations, for logs and metrics.
const (
	opCheck   = "check"
	opReserve = "reserve"
	opSettle  = "settle"
	opRefund  = "refund"
	opLease   = "lease"
)

// call runs op against the store through the guard (a caller that has
// already given up makes no call). failed reports a store failure; err is
// an invalid request (matching tokenlimit.ErrInvalid), a full store
// (matching tokenlimit.ErrStoreFull) or the caller's context error. A
// plain check that failed once sent may or may not have been applied: it
// is counted as an outcome unknown (reserves and settles are bound to an id
// and reconcile).
func (f *Failover) call(ctx context.Context, op string, run func(ctx context.Context) error) (failed bool, err error) {
	err = f.guard.Call(ctx, run)
	if err == nil {
		f.storeAnswered()
		return false, nil
	}
	var fe *FailedError // escapes to errors.As: declared past the success path
	switch {
	case answered(err): // refused, full or unsupported: a healthy store's answer
		return false, err
	case !errors.As(err, &fe): // the caller gave up, not the store
		f.outcomeUnknown(op)
		return false, err
	case errors.Is(fe.Err, ErrBreakerOpen):
		return true, nil
	}
	if f.observer.StoreFailed != nil {
		f.observer.StoreFailed(op)
	}
	f.outcomeUnknown(op)
	// A failed half-open trial only confirms the outage the breaker
	// already reported: once per cooldown, at debug.
	level := slog.LevelWarn
	switch {
	case !f.info.Remote:
		level = slog.LevelError
	case fe.Trial:
		level = slog.LevelDebug
	}
	f.log.Log(ctx, level, "store failed; applying failure modes", "op", op, "error", fe.Err)
	return true, nil
}

// outcomeUnknown counts a check sent to a remote store whose answer was
// lost.
func (f *Failover) outcomeUnknown(op string) {
	if op == opCheck && f.info.Remote && f.observer.OutcomeUnknown != nil {
		f.observer.OutcomeUnknown()
	}
}

// writeBack charges the store what fail-open budgets among items admitted
// locally while it failed, in the call that follows (the breaker's trial
// included), before that call's own request: the sooner the store counts
// it, the less it grants other replicas that it has already admitted.
func (f *Failover) writeBack(ctx context.Context, items []tokenlimit.Item) error {
	if !f.memory.AnyPending() {
		return nil
	}
	var w Writeback
	now := f.clock()
	for _, it := range items {
		f.memory.TakePending(&w, it, now)
	}
	return f.charge(ctx, w)
}

// charge charges w to the store. A failed call puts the cost back to be
// tried again: it may then be charged twice (the failed call may have
// landed), which denies early but never admits past the limit.
func (f *Failover) charge(ctx context.Context, w Writeback) error {
	if len(w.Adjustments) == 0 {
		return nil
	}
	err := f.store.Adjust(ctx, f.clock(), w.Adjustments)
	result := WritebackOK
	if err != nil {
		result = WritebackFailed
	}
	if f.observer.Writeback != nil {
		for i, a := range w.Adjustments {
			f.observer.Writeback(w.Limits[i], result, a.Delta)
		}
	}
	if errors.Is(err, tokenlimit.ErrInvalid) { // says nothing about the store: decide on
		f.log.Error("writing back fail-open charges was refused", "error", err)
		return nil
	}
	if err != nil {
		f.memory.PutBack(w, f.clock())
		return fmt.Errorf("writing back fail-open charges: %w", err)
	}
	f.memory.WrittenBack(w.Adjustments, f.clock())
	return nil
}

// refund takes back what an admitting Decide of items answered a charged:
// on the store (through the guard, past the caller's cancellation: it may
// be what ended the call), or on the local budgets, and then from what
// waits to be written back. A refund the store does not take leaves the
// charge standing until the budget refills it (logged). A leased item
// keeps its charge (it may have been paid from a lease, which the store
// must not be refunded): under-admission of its cost, never more.
func (f *Failover) refund(ctx context.Context, items []tokenlimit.Item, policies []Policy, a Answer) {
	var adjs []tokenlimit.Adjustment
	for i, it := range items {
		if it.Cost > 0 && !(a.Source != FromLocal && f.leases != nil && leasable(it, policies[i])) {
			if a.Source == FromLocal {
				it.Limit = ShareOf(it.Limit, policies[i].Share)
			}
			adjs = append(adjs, tokenlimit.Adjustment{Key: it.Key, Limit: it.Limit, Delta: -it.Cost, ChargedAt: a.At})
		}
	}
	if len(adjs) == 0 {
		return
	}
	var err error
	switch a.Source {
	case FromStore:
		err = f.adjustStore(ctx, opRefund, adjs)
	case FromLocal:
		err = f.localStore.Adjust(context.Background(), f.clock(), adjs)
		for i, it := range items {
			f.memory.Refunded(it, policies[i])
		}
	}
	if err != nil {
		f.log.Error("refunding a check another store refused failed: its charge stands until the budget refills it", "error", err)
	}
}

// adjustStore applies adjs on the store through the guard, past the
// caller's cancellation (it may be what ended the call); op names the call
// in logs and metrics. A store failure is ErrUnavailable: the adjustments
// may or may not have been applied.
func (f *Failover) adjustStore(ctx context.Context, op string, adjs []tokenlimit.Adjustment) error {
	failed, err := f.call(context.WithoutCancel(ctx), op, func(ctx context.Context) error {
		return f.store.Adjust(ctx, f.clock(), adjs)
	})
	if failed {
		return ErrUnavailable
	}
	return err
}

// failover decides items while the store fails: a fail-closed item makes
// the answer Unavailable; fail-open items are decided on their local
// budgets, each at its policy's share of the limit, started from the
// store's last answer and written back once it answers.
func (f *Failover) failover(items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result) Answer {
	now := f.clock()
	if a, closed := unavailable(items, policies, results, now); closed {
		return a
	}
	open := sharesOf(items, policies)
	ld, err := f.localCheck(open, now)
	if errors.Is(err, tokenlimit.ErrStoreFull) {
		f.log.Debug("key space full: request refused", "store", "local", "error", err)
		return Answer{At: now, Source: FromLocal, Full: true}
	}
	if err != nil {
		f.log.Error("local fail-open budget failed", "error", err)
		return Answer{At: now, Source: Unavailable, Items: []int{}}
	}
	for i, it := range open {
		f.memory.AnsweredLocally(it, policies[i], ld.Results[i], ld.At, now)
	}
	if ld.Allowed {
		for i, it := range open {
			f.memory.Admitted(it, policies[i], ld.Results[i], ld.At, now)
		}
	}
	copy(results, ld.Results)
	return Answer{At: ld.At, Allowed: ld.Allowed, Source: FromLocal}
}

// localCheck checks open (items at their shares) on the local budgets,
// seeded first from the store's last answers.
func (f *Failover) localCheck(open []tokenlimit.Item, now time.Time) (tokenlimit.Decision, error) {
	if err := f.seed(open, now); err != nil {
		return tokenlimit.Decision{}, err
	}
	return f.local.Check(context.Background(), open...)
}

// unavailable returns the answer to items while the store fails if a
// fail-closed item among them makes it Unavailable (closed true): their
// results then carry their limits' capacities. A shadow item counts as
// fail-closed: it is only reported, and what it would have answered on a
// local budget is worth nothing.
func unavailable(items []tokenlimit.Item, policies []Policy, results []tokenlimit.Result, now time.Time) (a Answer, closed bool) {
	a = Answer{At: now, Source: Unavailable}
	for i, p := range policies {
		if !p.Open || p.Shadow {
			a.Items = append(a.Items, i)
			results[i] = tokenlimit.Result{Limit: items[i].Limit.Capacity()}
		}
	}
	return a, len(a.Items) > 0
}

// sharesOf returns items with each limit scaled to its policy's share.
// Every policy is open.
func sharesOf(items []tokenlimit.Item, policies []Policy) []tokenlimit.Item {
	out := make([]tokenlimit.Item, len(items))
	for i, it := range items {
		it.Limit = ShareOf(it.Limit, policies[i].Share)
		out[i] = it
	}
	return out
}

// seed starts the local budgets of open (items at their shares) from the
// store's last answers (FailOpen.Seed).
func (f *Failover) seed(open []tokenlimit.Item, now time.Time) error {
	for _, it := range open {
		if err := f.memory.Seed(f.localStore, it, now); err != nil {
			return err
		}
	}
	return nil
}
