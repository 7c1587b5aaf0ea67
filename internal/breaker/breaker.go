// Package breaker is a small circuit breaker for calls to a remote store:
// after Threshold consecutive failures it opens and callers skip the store
// for Cooldown; then one trial call is let through (half-open), and a success
// closes it again. It is safe for concurrent use and reads time from an
// injected clock.
package breaker

import (
	"math"
	"sync"
	"sync/atomic"
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

// Ticket identifies a call Allow let through; pass it to Done or Cancel.
// A ticket from before the breaker last changed state is stale: its outcome
// says nothing about the dependency now, and is ignored.
type Ticket uint64

// Breaker guards one remote dependency. The zero value is not usable; use New.
type Breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time

	onChange func(from, to State, failures int)

	// clean is gen while the breaker is closed with no failure counted,
	// and notClean otherwise: in that state, the usual one, Allow, Done
	// of a success, Cancel and State answer from it without taking mu
	// (they would change nothing). It is written with mu held.
	clean atomic.Uint64

	mu       sync.Mutex
	state    State
	gen      Ticket // changes with every state change
	failures int
	openedAt time.Time
	trial    bool // a half-open trial call is in flight
}

// notClean is Breaker.clean's value when the breaker is not closed or has
// failures counted; gen, which counts state changes, never reaches it.
const notClean = math.MaxUint64

// New returns a closed breaker; threshold < 1 is taken as 1.
func New(threshold int, cooldown time.Duration, now func() time.Time) *Breaker {
	return &Breaker{threshold: max(1, threshold), cooldown: cooldown, now: now}
}

// cleanTicket returns the ticket of the current state if the breaker is
// closed with no failure counted.
func (b *Breaker) cleanTicket() (Ticket, bool) {
	g := b.clean.Load()
	return Ticket(g), g != notClean
}

// publish sets clean from the state; the caller holds b.mu.
func (b *Breaker) publish() {
	if b.state == Closed && b.failures == 0 {
		b.clean.Store(uint64(b.gen))
		return
	}
	b.clean.Store(notClean)
}

// OnChange makes b call f on every change of state, once per change, with
// the consecutive failures counted when it happened. f runs with b's lock
// held, in the goroutine whose call changed the state: it must be quick and
// must not call b. Set it before b is used; it is not safe to change
// concurrently with calls.
func (b *Breaker) OnChange(f func(from, to State, failures int)) { b.onChange = f }

// Allow reports whether a call may go to the dependency now, and the ticket
// to report its outcome with (Done or Cancel).
func (b *Breaker) Allow() (Ticket, bool) {
	if t, ok := b.cleanTicket(); ok {
		return t, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == Open && b.now().Sub(b.openedAt) >= b.cooldown {
		b.set(HalfOpen)
	}
	switch {
	case b.state == Closed:
		return b.gen, true
	case b.state == HalfOpen && !b.trial:
		b.trial = true
		return b.gen, true
	}
	return b.gen, false
}

// Ready reports whether Allow would let a call through now: the breaker is
// closed, or a half-open trial is due and none is in flight. It changes
// nothing; a call may still be refused if another takes the trial first.
func (b *Breaker) Ready() bool {
	if _, ok := b.cleanTicket(); ok {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Closed:
		return true
	case Open:
		return b.now().Sub(b.openedAt) >= b.cooldown
	}
	return !b.trial
}

// Done records the outcome of the call t: a success closes the breaker, a
// failure counts towards opening it (a failed trial reopens it at once).
func (b *Breaker) Done(t Ticket, err error) {
	if clean, ok := b.cleanTicket(); ok && err == nil && t == clean {
		return // closed with no failures: a success changes nothing
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t != b.gen {
		return // the breaker moved on since this call began
	}
	b.trial = false
	defer b.publish()
	if err == nil {
		b.failures = 0
		b.set(Closed)
		return
	}
	b.failures++
	if b.state == HalfOpen || b.failures >= b.threshold {
		b.openedAt = b.now()
		b.set(Open)
	}
}

// Cancel records that the call t ended without saying anything about the
// dependency (its caller gave up): it counts neither as a success nor as a
// failure, and a half-open breaker may try again.
func (b *Breaker) Cancel(t Ticket) {
	if _, ok := b.cleanTicket(); ok {
		return // closed: no trial is in flight
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t == b.gen {
		b.trial = false
	}
}

// State returns the current state.
func (b *Breaker) State() State {
	if _, ok := b.cleanTicket(); ok {
		return Closed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// set moves to state s; the caller holds b.mu.
func (b *Breaker) set(s State) {
	if s == b.state {
		return
	}
	from := b.state
	b.state = s
	b.gen++
	b.publish()
	if b.onChange != nil {
		b.onChange(from, s, b.failures)
	}
}
