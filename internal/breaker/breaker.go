// Package breaker is a small circuit breaker for calls to a remote store:
// after Threshold consecutive failures it opens and callers skip the store
// for Cooldown; then one trial call is let through (half-open), and a success
// closes it again. It is safe for concurrent use and reads time from an
// injected clock.
package breaker

import (
	"sync"
	"time"
)

// State is the breaker's state.
type State int

// The states, in the order of the usual Prometheus encoding (0 closed).
const (
	Closed State = iota
	HalfOpen
	Open
)

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	return [...]string{"closed", "half-open", "open"}[s]
}

// Breaker guards one remote dependency. The zero value is not usable; use New.
type Breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time
	onChange  func(State)

	mu       sync.Mutex
	state    State
	failures int
	openedAt time.Time
	trial    bool // a half-open trial call is in flight
}

// New returns a closed breaker. threshold < 1 is taken as 1; onChange, if
// not nil, is called (without the breaker's lock) on every state change.
func New(threshold int, cooldown time.Duration, now func() time.Time, onChange func(State)) *Breaker {
	return &Breaker{threshold: max(1, threshold), cooldown: cooldown, now: now, onChange: onChange}
}

// Allow reports whether a call may go to the dependency now. Every call it
// allows must be followed by Done.
func (b *Breaker) Allow() bool {
	b.mu.Lock()
	changed := false
	if b.state == Open && b.now().Sub(b.openedAt) >= b.cooldown {
		b.state, changed = HalfOpen, true
	}
	ok := b.state == Closed || (b.state == HalfOpen && !b.trial)
	if b.state == HalfOpen && ok {
		b.trial = true
	}
	state := b.state
	b.mu.Unlock()
	b.notify(changed, state)
	return ok
}

// Done records the outcome of a call Allow let through.
func (b *Breaker) Done(err error) {
	b.mu.Lock()
	before := b.state
	b.trial = false
	if err == nil {
		b.state, b.failures = Closed, 0
	} else {
		b.failures++
		if b.state == HalfOpen || b.failures >= b.threshold {
			b.state, b.openedAt = Open, b.now()
		}
	}
	state := b.state
	b.mu.Unlock()
	b.notify(state != before, state)
}

// Cancel records that a call Allow let through ended without saying
// anything about the dependency (its caller gave up): it counts neither as
// a success nor as a failure, and a half-open breaker may try again.
func (b *Breaker) Cancel() {
	b.mu.Lock()
	b.trial = false
	b.mu.Unlock()
}

// State returns the current state.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

func (b *Breaker) notify(changed bool, s State) {
	if changed && b.onChange != nil {
		b.onChange(s)
	}
}
