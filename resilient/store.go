// Package resilient keeps a failing rate-limit store from its callers. Its
// Store wraps a store and gives every call a deadline (shared between the
// calls of one tick, deadline.go) and a circuit breaker, and tells its
// caller whether the store failed (ErrUnavailable) apart from a request the
// store refused, a full store or a caller that gave up; the
// envoyproxy/ratelimit drop-in applies its failure modes to ErrUnavailable.
// Failover (failover.go) is the service's whole fault layer on top of it:
// failure modes per item, local budgets while the store fails, the
// write-back, the recovery hold, the reconciling of local reservations and
// leases (budgets decided in process from shares taken from the store,
// lease.go); budget.go names the states a budget goes through.
//
// It sits below service and envoycompat and above the stores: it imports
// no transport and no configuration.
package resilient

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/breaker"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// ErrUnavailable marks a store call that failed (an error, its deadline
// passed) or that the open breaker did not make: the store could not
// answer, and the caller applies its failure modes. Test with errors.Is;
// errors.As with *FailedError says whether it was a half-open trial.
var ErrUnavailable = errors.New("the rate-limit store is unavailable")

// ErrBreakerOpen is the cause (FailedError.Err) of a call the open breaker
// did not make.
var ErrBreakerOpen = errors.New("circuit breaker open: the store failed recently")

// FailedError is a store call that failed. It matches ErrUnavailable and
// unwraps to the store's error.
type FailedError struct {
	Err error
	// Trial is true for the breaker's half-open trial: its failure only
	// confirms the outage the breaker already reported.
	Trial bool
}

func (e *FailedError) Error() string { return "rate-limit store failed: " + e.Err.Error() }

// Unwrap returns ErrUnavailable and the store's error.
func (e *FailedError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Timeout bounds each call to a remote store; DefaultTimeout when 0.
	Timeout time.Duration
	// BreakerThreshold consecutive failures open the breaker;
	// DefaultBreakerThreshold when 0.
	BreakerThreshold int
	// BreakerCooldown is how long the open breaker skips the store before
	// one trial call; DefaultBreakerCooldown when 0.
	BreakerCooldown time.Duration
	// Clock is the breaker's time source; time.Now when nil.
	Clock func() time.Time
	// OnBreaker, if set, is called on every change of the breaker's state
	// (see breaker.Breaker.OnChange: quick, no calls back).
	OnBreaker func(from, to breaker.State, failures int)
	// OnFull, if set, is called with true when the store refuses a call
	// for want of room for a new key (tokenlimit.ErrStoreFull) after it
	// had room, and with false at its first answered call once it has
	// room again (a store counting its keys, as the embedded one does,
	// has fewer than its bound; any other at its next answered call): once
	// per change, as OnBreaker, so that a full store is logged once rather
	// than per request. Quick, no calls back.
	OnFull func(full bool)
}

// The defaults of Options, for the callers that configure a Store (and
// document these values) without repeating them.
const (
	DefaultTimeout          = 50 * time.Millisecond
	DefaultBreakerThreshold = 5
	DefaultBreakerCooldown  = time.Second
)

// Store is a store whose calls fail fast and classified. It implements
// tokenlimit.Store; every method's error that is a store failure matches
// ErrUnavailable. A store that describes itself as local (the embedded
// store) gets no deadline and no breaker: its failures still match
// ErrUnavailable. It is safe for concurrent use.
type Store struct {
	store     tokenlimit.Store
	info      tokenlimit.StoreInfo
	clock     func() time.Time
	breaker   *breaker.Breaker
	deadlines *storeDeadlines
	// answered is set once the store has answered a call; lastErr is the
	// error of the last failed call, cleared by a success.
	answered atomic.Bool
	lastErr  atomic.Pointer[string]
	// full is set while the store is taken to be full (see Options.OnFull).
	full   atomic.Bool
	onFull func(full bool)
}

var _ tokenlimit.Store = (*Store)(nil)

// New returns store guarded by opts.
func New(store tokenlimit.Store, opts Options) (*Store, error) {
	if store == nil {
		return nil, errors.New("resilient: New needs a store")
	}
	if opts.Timeout < 0 || opts.BreakerCooldown < 0 || opts.BreakerThreshold < 0 {
		return nil, fmt.Errorf("resilient: New: Timeout, BreakerThreshold and BreakerCooldown must not be negative, got %s, %d, %s",
			opts.Timeout, opts.BreakerThreshold, opts.BreakerCooldown)
	}
	opts = withDefaults(opts)
	s := &Store{store: store, info: tokenlimit.Describe(store), clock: opts.Clock, onFull: opts.OnFull,
		breaker: breaker.New(opts.BreakerThreshold, opts.BreakerCooldown, opts.Clock), deadlines: newStoreDeadlines(opts.Timeout)}
	if opts.OnBreaker != nil {
		s.breaker.OnChange(opts.OnBreaker)
	}
	return s, nil
}

func withDefaults(o Options) Options {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.BreakerThreshold == 0 {
		o.BreakerThreshold = DefaultBreakerThreshold
	}
	if o.BreakerCooldown == 0 {
		o.BreakerCooldown = DefaultBreakerCooldown
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return o
}

// Call runs run against the store: for a remote store through the breaker
// (failing fast while it is open) and within the timeout; a caller whose
// context has ended makes no call. It returns nil; an error matching
// tokenlimit.ErrInvalid, tokenlimit.ErrUnsupported or
// tokenlimit.ErrStoreFull, which the store answered (a healthy store); the caller's context error when the caller
// gave up (the breaker counts nothing); or a *FailedError, matching
// ErrUnavailable.
func (s *Store) Call(ctx context.Context, run func(ctx context.Context) error) error {
	if !s.info.Remote {
		err := run(ctx)
		s.noteFull(err)
		if answered(err) || ctx.Err() != nil {
			return callerError(ctx, err)
		}
		return &FailedError{Err: err}
	}
	ticket, ok := s.breaker.Allow()
	if !ok {
		return &FailedError{Err: ErrBreakerOpen}
	}
	err := ctx.Err()
	if err == nil {
		err = run(s.deadlines.context(ctx))
	}
	switch {
	case answered(err):
		s.noteFull(err)
		s.breaker.Done(ticket, nil)
		if err == nil {
			s.record(nil)
		}
		return err
	case ctx.Err() != nil: // the caller gave up, not the store
		s.breaker.Cancel(ticket)
		return ctx.Err()
	}
	trial := s.breaker.State() == breaker.HalfOpen
	s.breaker.Done(ticket, err)
	s.record(err)
	return &FailedError{Err: err, Trial: trial}
}

// answered reports whether err is an answer of a healthy store: none, a
// refused request, an unsupported one (a reservation on a store that keeps
// none) or a full store.
func answered(err error) bool {
	return err == nil || errors.Is(err, tokenlimit.ErrInvalid) || errors.Is(err, tokenlimit.ErrUnsupported) ||
		errors.Is(err, tokenlimit.ErrStoreFull)
}

// keyCounter is a store that counts its keys under a bound, as the
// embedded store does.
type keyCounter interface {
	Len() int
	MaxKeys() int
}

// noteFull follows, from a call's error, whether the store is full, and
// tells OnFull of each change. While the store is not full it costs a
// load.
func (s *Store) noteFull(err error) {
	switch {
	case err == nil:
		if s.full.Load() && s.hasRoom() && s.full.CompareAndSwap(true, false) && s.onFull != nil {
			s.onFull(false)
		}
	case errors.Is(err, tokenlimit.ErrStoreFull):
		if !s.full.Load() && s.full.CompareAndSwap(false, true) && s.onFull != nil {
			s.onFull(true)
		}
	}
}

// hasRoom reports whether the store has room for a new key: fewer keys
// than its bound when it counts them, else always.
func (s *Store) hasRoom() bool {
	kc, ok := s.store.(keyCounter)
	return !ok || kc.Len() < kc.MaxKeys()
}

// callerError is err of a local store's call, or the caller's context
// error if it gave up.
func callerError(ctx context.Context, err error) error {
	if answered(err) {
		return err
	}
	return ctx.Err()
}

// record notes the outcome of a call, for Health.
func (s *Store) record(err error) {
	if err != nil {
		msg := err.Error()
		s.lastErr.Store(&msg)
		return
	}
	// Loaded first: every call that succeeds gets here, and a store to a
	// line that every CPU reads costs more than a load.
	if !s.answered.Load() {
		s.answered.Store(true)
	}
	if s.lastErr.Load() != nil {
		s.lastErr.Store(nil)
	}
}

// Check is the store's Check through Call.
func (s *Store) Check(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (at time.Time, err error) {
	err = s.Call(ctx, func(ctx context.Context) error {
		at, err = s.store.Check(ctx, now, items, results)
		return err
	})
	return at, err
}

// Adjust is the store's Adjust through Call.
func (s *Store) Adjust(ctx context.Context, now time.Time, adjustments []tokenlimit.Adjustment) error {
	return s.Call(ctx, func(ctx context.Context) error { return s.store.Adjust(ctx, now, adjustments) })
}

// Reset is the store's Reset through Call.
func (s *Store) Reset(ctx context.Context, key string, alg tokenlimit.Algorithm) error {
	return s.Call(ctx, func(ctx context.Context) error { return s.store.Reset(ctx, key, alg) })
}

// Reserve is the store's Reserve through Call.
func (s *Store) Reserve(ctx context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (out tokenlimit.ReserveOutcome, err error) {
	err = s.Call(ctx, func(ctx context.Context) error {
		out, err = storekit.Reserve(ctx, s.store, now, req, results)
		return err
	})
	return out, err
}

// Settle is the store's Settle through Call.
func (s *Store) Settle(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (st tokenlimit.SettleStatus, err error) {
	err = s.Call(ctx, func(ctx context.Context) error {
		st, err = storekit.Settle(ctx, s.store, now, req)
		return err
	})
	return st, err
}

// Describe returns what the wrapped store says about itself.
func (s *Store) Describe() tokenlimit.StoreInfo { return s.info }

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() tokenlimit.Store { return s.store }

// Breaker returns the store's breaker, for gauges and for callers that
// must know whether a call would be let through (Ready).
func (s *Store) Breaker() *breaker.Breaker { return s.breaker }

// BreakerGauge returns the breaker's state as the gauge
// tokenlimit_breaker_state with labels (nil for none), read when scraped
// so that it never lags behind the breaker.
func (s *Store) BreakerGauge(labels prometheus.Labels) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "tokenlimit_breaker_state",
		Help:        "The store's circuit breaker: 0 closed, 1 half-open, 2 open.",
		ConstLabels: labels,
	}, func() float64 { return float64(s.breaker.State()) })
}

// Health is the store's health.
type Health struct {
	// Breaker is "closed", "half-open" or "open".
	Breaker string
	// Degraded is true while the store is failing (breaker not closed), and
	// while a remote store has not answered once.
	Degraded bool
	// Error is the last store error while Degraded; empty otherwise.
	Error string
}

// healthKey is the budget a health probe peeks at.
const healthKey = "tokenlimit:health"

// Peek asks store about the health budget at now, charging nothing: one
// call that shows whether store answers.
func Peek(ctx context.Context, store tokenlimit.Store, now time.Time) error {
	peek := []tokenlimit.Item{{Key: healthKey, Limit: tokenlimit.FixedWindowLimit(1, time.Second)}}
	_, err := store.Check(ctx, now, peek, make([]tokenlimit.Result, 1))
	return err
}

// Health returns the store's health. While the breaker is not closed and
// its cooldown has passed, or while a remote store has not answered yet, it
// probes the store itself (one peek, within the timeout), so that a process
// with no traffic still notices that the store came back, or that it never
// answered. ok reports that the probe was made and answered.
func (s *Store) Health(ctx context.Context) (h Health, probed bool) {
	if s.info.Remote && (s.breaker.State() != breaker.Closed || !s.answered.Load()) && s.breaker.Ready() {
		probed = Peek(ctx, s, s.clock()) == nil
	}
	st := s.breaker.State()
	h = Health{Breaker: st.String(), Degraded: st != breaker.Closed || (s.info.Remote && !s.answered.Load())}
	if msg := s.lastErr.Load(); h.Degraded && msg != nil {
		h.Error = *msg
	}
	return h, probed
}
