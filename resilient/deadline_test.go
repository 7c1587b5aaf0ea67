package resilient

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

// A store call's context carries its caller's values and ends at the
// shared deadline: no earlier than the timeout after the call starts, at
// most a tick later. A caller whose own deadline comes first keeps its
// context. The caller's cancellation does not reach it, and its cause is
// its own deadline even below a cancelable context, such as an RPC's.
func TestStoreContextEndsAtTheSharedDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 20 * time.Millisecond
	d := newStoreDeadlines(timeout)
	parent, cancelParent := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
	defer cancelParent(nil)
	before := time.Now()
	ctx := d.context(parent)
	after := time.Now()
	at, ok := ctx.Deadline()
	if !ok || at.Before(before.Add(timeout)) || at.After(after.Add(timeout+timeout/storeTicks)) {
		t.Errorf("deadline %v (set %v), want within [%v, %v]", at, ok, before.Add(timeout), after.Add(timeout+timeout/storeTicks))
	}
	if got := ctx.Value(ctxKey{}); got != "v" {
		t.Errorf("Value = %v, want the caller's v", got)
	}
	if err := ctx.Err(); err != nil {
		select {
		case <-ctx.Done():
		default:
			t.Errorf("Err = %v before Done is closed", err)
		}
	}
	cancelParent(errors.New("the caller gave up"))
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Cause after the caller gave up = %v, want nil or DeadlineExceeded", err)
	}
	<-ctx.Done()
	if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Err after Done = %v, want DeadlineExceeded", err)
	}
	if err := context.Cause(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Cause after Done = %v, want DeadlineExceeded", err)
	}

	sooner, cancel := context.WithTimeout(parent, timeout/2)
	defer cancel()
	if got := d.context(sooner); got != sooner {
		t.Errorf("a caller whose deadline comes first got %v, want its own context", got)
	}
}

// Calls that want a deadline within one tick share it; a later one gets
// the next.
func TestStoreDeadlinesAreSharedWithinATick(t *testing.T) {
	t.Parallel()
	const timeout = time.Hour // no timer fires during the test
	d := newStoreDeadlines(timeout)
	want := time.Now().Add(timeout)
	first := d.shared(want)
	if !first.at.Equal(want.Add(d.tick)) {
		t.Errorf("first deadline %v, want %v: a tick after the one wanted", first.at, want.Add(d.tick))
	}
	if got := d.shared(want.Add(d.tick)); got != first {
		t.Errorf("a call wanting the shared deadline itself got another, at %v", got.at)
	}
	next := d.shared(want.Add(d.tick + time.Nanosecond))
	if next == first || next.at.Before(want.Add(d.tick+time.Nanosecond)) {
		t.Errorf("a call wanting past the shared deadline got %v (the first: %v)", next.at, next == first)
	}
	// A call that read the time before another made the next deadline
	// (preempted in between) gets that one, later than it needs.
	if got := d.shared(want); got != next {
		t.Error("a call wanting an earlier deadline did not get the current one")
	}
}
