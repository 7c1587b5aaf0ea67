package resilient

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// This file gives store calls their timeout without a timer each. A call's
// context from context.WithTimeout costs a timer, a child registered on the
// caller's context and a channel, per decision. Instead, the calls that
// start within one tick of each other share one deadline, ended by one
// timer: each call still gets at least the store timeout, and at most a
// tick more (storeTicks per timeout; a call preempted between reading the
// time and taking its deadline may get a later one).
//
// The shared deadline is not a child of the caller's context: a caller that
// gives up while its call is in flight no longer cuts the call short; the
// call ends when the store answers, or at its deadline. A caller whose own
// deadline comes first keeps its own context, which ends the call then, as
// before. A caller that gave up before the call makes none (Store.Call).

// storeTicks is how many ticks make a store timeout: a call waits at most
// timeout/storeTicks longer than the timeout.
const storeTicks = 32

// storeDeadlines hands out the shared deadlines of store calls. It is safe
// for concurrent use.
type storeDeadlines struct {
	timeout, tick time.Duration
	mu            sync.Mutex // held to make the next deadline
	cur           atomic.Pointer[sharedDeadline]
}

func newStoreDeadlines(timeout time.Duration) *storeDeadlines {
	return &storeDeadlines{timeout: timeout, tick: timeout / storeTicks}
}

// context returns the context of a store call for a caller with ctx: ctx
// itself if its deadline is no later than the call's, else one with ctx's
// values that ends at the shared deadline.
func (d *storeDeadlines) context(ctx context.Context) context.Context {
	sd := d.shared(time.Now().Add(d.timeout))
	if at, ok := ctx.Deadline(); ok && !at.After(sd.at) {
		return ctx
	}
	return &storeContext{Context: context.WithoutCancel(ctx), deadline: sd}
}

// shared returns a deadline no earlier than want and at most a tick later.
func (d *storeDeadlines) shared(want time.Time) *sharedDeadline {
	if sd := d.cur.Load(); sd != nil && !sd.at.Before(want) {
		return sd
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if sd := d.cur.Load(); sd != nil && !sd.at.Before(want) {
		return sd
	}
	sd := newSharedDeadline(want.Add(d.tick))
	d.cur.Store(sd)
	return sd
}

// sharedDeadline is a deadline several store calls share: done is closed
// once at has passed.
type sharedDeadline struct {
	at   time.Time
	done chan struct{}
}

func newSharedDeadline(at time.Time) *sharedDeadline {
	sd := &sharedDeadline{at: at, done: make(chan struct{})}
	time.AfterFunc(time.Until(at), func() { close(sd.done) })
	return sd
}

// storeContext is the context of one store call: its caller's values, and
// the shared deadline's end. It holds the caller's context without its
// cancellation, so context.Cause reports the shared deadline, not a cause
// of the caller's.
type storeContext struct {
	context.Context // the caller's without its cancellation, for its values
	deadline        *sharedDeadline
}

// Deadline returns the shared deadline.
func (c *storeContext) Deadline() (time.Time, bool) { return c.deadline.at, true }

// Done is closed once the shared deadline has passed.
func (c *storeContext) Done() <-chan struct{} { return c.deadline.done }

// Err is context.DeadlineExceeded once Done is closed, and nil before.
func (c *storeContext) Err() error {
	select {
	case <-c.deadline.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
