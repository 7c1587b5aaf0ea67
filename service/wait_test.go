package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

// waitYAML is one request a second per user, a denied request waiting up
// to 2 s for it; waitingTwo the same with at most one waiting per user.
const (
	waitYAML = `
limits:
  - {name: per-second, key: [user], algorithm: fixed_window, limit: 1/s, wait: 2s}
`
	waitOneYAML = `
limits:
  - {name: per-second, key: [user], algorithm: fixed_window, limit: 1/s, wait: 2s, max_waiting: 1}
`
)

// answer is a decision made in a goroutine.
type answer struct {
	d   service.Decision
	err error
}

// checkLater decides desc in a goroutine with ctx; the answer arrives on
// the channel returned.
func (e *env) checkLater(ctx context.Context, desc D) <-chan answer {
	c := make(chan answer, 1)
	go func() {
		d, err := e.svc.Check(ctx, service.Request{Descriptors: desc})
		c <- answer{d, err}
	}()
	return c
}

// asleep waits until n requests wait, each asleep on its two timers (its
// retry-after and its deadline) of the fake clock.
func (e *env) asleep(n int) {
	e.t.Helper()
	testkit.Eventually(e.t, 10*time.Second, "requests waiting", func() bool {
		return testkit.Metric(e.t, e.reg, "tokenlimit_waiting") == float64(n) && e.clock.Timers() == 2*n
	})
}

// pending fails the test if c has answered.
func pending(t *testing.T, c <-chan answer, who string) {
	t.Helper()
	select {
	case a := <-c:
		t.Fatalf("%s answered before its budget refilled: %s, %v", who, describe(a.d), a.err)
	default:
	}
}

// got waits for c's answer.
func got(t *testing.T, c <-chan answer, who string) answer {
	t.Helper()
	select {
	case a := <-c:
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not answer", who)
		return answer{}
	}
}

// TestWaitAdmitsAfterRetryAfter: a request denied with a retry-after of
// 300 ms under wait: 2s is held, and admitted once 300 ms have passed on
// the service's clock, not before.
func TestWaitAdmitsAfterRetryAfter(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, waitYAML, t0.Add(700*time.Millisecond))
		u := D{"user": "u"}
		if d := e.check(u, 1); !d.Allowed {
			t.Fatalf("first request denied: %s", describe(d))
		}
		c := e.checkLater(context.Background(), u)
		e.asleep(1)
		e.clock.Advance(299 * time.Millisecond)
		pending(t, c, "the waiting request")
		e.clock.Advance(time.Millisecond)
		a := got(t, c, "the waiting request")
		if a.err != nil || !a.d.Allowed || a.d.Waited != 300*time.Millisecond {
			t.Fatalf("after 300 ms: %s waited %v, %v; want admitted after 300ms", describe(a.d), a.d.Waited, a.err)
		}
		if r := e.remaining(u, "per-second"); r != 0 {
			t.Errorf("remaining %d after the waiter's charge, want 0 (charged once)", r)
		}
		e.asleep(0)
		if n := testkit.Metric(t, e.reg, "tokenlimit_waits_total", "outcome", "admitted"); n != 1 {
			t.Errorf("tokenlimit_waits_total{outcome=admitted} = %v, want 1", n)
		}
	})
}

// TestWaitFirstComeFirstServed: two requests waiting on one budget are
// decided in arrival order: when the budget refills for one, the first
// takes it and the second waits on for the next window, within its wait.
func TestWaitFirstComeFirstServed(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, waitYAML, t0.Add(700*time.Millisecond))
		u := D{"user": "u"}
		e.check(u, 1)
		first := e.checkLater(context.Background(), u)
		e.asleep(1)
		e.clock.Advance(100 * time.Millisecond) // the second's retry-after is 200 ms: both wake at the same time
		second := e.checkLater(context.Background(), u)
		e.asleep(2)
		e.clock.Advance(200 * time.Millisecond)
		if a := got(t, first, "the first waiter"); a.err != nil || !a.d.Allowed || a.d.Waited != 300*time.Millisecond {
			t.Fatalf("first waiter: %s waited %v, %v; want admitted after 300ms", describe(a.d), a.d.Waited, a.err)
		}
		// The second was denied again (retry-after 1 s, 1.2 s in all:
		// within 2 s) and waits on.
		e.asleep(1)
		pending(t, second, "the second waiter")
		e.clock.Advance(time.Second)
		if a := got(t, second, "the second waiter"); a.err != nil || !a.d.Allowed || a.d.Waited != 1200*time.Millisecond {
			t.Fatalf("second waiter: %s waited %v, %v; want admitted after 1.2s", describe(a.d), a.d.Waited, a.err)
		}
	})
}

// TestWaitMaxWaiting: with max_waiting: 1, a second request denied while
// one waits is answered 429 at once, and the other user's budget has a
// queue of its own.
func TestWaitMaxWaiting(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, waitOneYAML, t0.Add(700*time.Millisecond))
		u, v := D{"user": "u"}, D{"user": "v"}
		e.check(u, 1)
		e.check(v, 1)
		c := e.checkLater(context.Background(), u)
		e.asleep(1)
		d := e.check(u, 1) // synchronous: it must not wait
		if o := mustOutcome(t, d, "per-second"); d.Allowed || d.Waited != 0 || o.RetryAfter != 300*time.Millisecond {
			t.Fatalf("request beyond max_waiting: %s waited %v; want denied at once with retry-after 300ms", describe(d), d.Waited)
		}
		if n := testkit.Metric(t, e.reg, "tokenlimit_waits_total", "outcome", "full"); n != 1 {
			t.Errorf("tokenlimit_waits_total{outcome=full} = %v, want 1", n)
		}
		other := e.checkLater(context.Background(), v)
		e.asleep(2)
		e.clock.Advance(300 * time.Millisecond)
		for _, w := range []struct {
			c   <-chan answer
			who string
		}{{c, "u's waiter"}, {other, "v's waiter"}} {
			if a := got(t, w.c, w.who); a.err != nil || !a.d.Allowed {
				t.Errorf("%s: %s, %v; want admitted", w.who, describe(a.d), a.err)
			}
		}
	})
}

// TestWaitCancelChargesNothing: a waiter whose context ends returns at
// once with the context's error, charges nothing, and gives its turn to
// the next waiter, which alone is charged.
func TestWaitCancelChargesNothing(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, waitYAML, t0.Add(700*time.Millisecond))
		u := D{"user": "u"}
		e.check(u, 1)
		ctx, cancel := context.WithCancel(context.Background())
		gone := e.checkLater(ctx, u)
		e.asleep(1)
		next := e.checkLater(context.Background(), u)
		e.asleep(2)
		cancel()
		if a := got(t, gone, "the cancelled waiter"); !errors.Is(a.err, context.Canceled) {
			t.Fatalf("cancelled waiter: %s, %v; want context.Canceled", describe(a.d), a.err)
		}
		e.asleep(1)
		e.clock.Advance(300 * time.Millisecond)
		if a := got(t, next, "the next waiter"); a.err != nil || !a.d.Allowed {
			t.Fatalf("next waiter: %s, %v; want admitted", describe(a.d), a.err)
		}
		if r := e.remaining(u, "per-second"); r != 0 {
			t.Errorf("remaining %d, want 0: the next waiter's charge alone", r)
		}
		e.clock.Advance(time.Second) // a new window: the cancelled waiter left nothing behind
		if r := e.remaining(u, "per-second"); r != 1 {
			t.Errorf("remaining %d in the next window, want 1", r)
		}
		if n := testkit.Metric(t, e.reg, "tokenlimit_waits_total", "outcome", "cancelled"); n != 1 {
			t.Errorf("tokenlimit_waits_total{outcome=cancelled} = %v, want 1", n)
		}
	})
}

// TestWaitTooLong: a retry-after longer than the wait, or a denial by a
// limit without a wait, is answered 429 at once.
func TestWaitTooLong(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, `
limits:
  - {name: per-minute, key: [user], algorithm: fixed_window, limit: 1/min, wait: 2s}
  - {name: per-second, key: [team], algorithm: fixed_window, limit: 1/s, wait: 2s}
  - {name: no-wait, key: [ip], algorithm: fixed_window, limit: 1/s}
`, t0.Add(700*time.Millisecond))
		for _, desc := range []D{{"user": "u"}, {"team": "t", "ip": "i"}} {
			e.check(desc, 1)
			if d := e.check(desc, 1); d.Allowed || d.Waited != 0 {
				t.Errorf("%v: %s waited %v; want denied at once", desc, describe(d), d.Waited)
			}
		}
		if n := e.clock.Timers(); n != 0 {
			t.Errorf("%d timers left, want none", n)
		}
	})
}

// TestWaitReserve: a reservation waits as a check does, and the proxy's
// Cancel channel ends its wait with nothing charged.
func TestWaitReserve(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, waitYAML, t0.Add(700*time.Millisecond))
		u := D{"user": "u"}
		e.check(u, 1)
		reserve := func(id string, cancel <-chan struct{}) <-chan answer {
			c := make(chan answer, 1)
			go func() {
				d, err := e.svc.ReserveWith(context.Background(), service.ReserveOptions{ID: id, Cancel: cancel}, service.Request{Descriptors: u})
				c <- answer{d, err}
			}()
			return c
		}
		stop := make(chan struct{})
		gone := reserve("gone", stop)
		e.asleep(1)
		kept := reserve("kept", nil)
		e.asleep(2)
		close(stop)
		if a := got(t, gone, "the cancelled reservation"); !errors.Is(a.err, context.Canceled) {
			t.Fatalf("cancelled reservation: %s, %v; want context.Canceled", describe(a.d), a.err)
		}
		e.asleep(1)
		e.clock.Advance(300 * time.Millisecond)
		a := got(t, kept, "the waiting reservation")
		if a.err != nil || !a.d.Allowed || !a.d.Reserved || a.d.Waited != 300*time.Millisecond {
			t.Fatalf("waiting reservation: %s reserved=%v waited %v, %v; want reserved after 300ms", describe(a.d), a.d.Reserved, a.d.Waited, a.err)
		}
		if st, err := e.svc.Settle(context.Background(), "gone", 0); err != nil || st.String() != "unknown reservation" {
			t.Errorf("Settle(gone) = %v, %v; want unknown: it never reserved", st, err)
		}
	})
}

// TestWaitDeniedAgain: a waiter denied again, whose next retry-after would
// take its total wait past the limit's wait, is answered the denial.
func TestWaitDeniedAgain(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, `
limits:
  - {name: per-second, key: [user], algorithm: fixed_window, limit: 1/s, wait: 1s}
`, t0.Add(700*time.Millisecond))
		u := D{"user": "u"}
		e.check(u, 1)
		first := e.checkLater(context.Background(), u)
		e.asleep(1)
		second := e.checkLater(context.Background(), u)
		e.asleep(2)
		e.clock.Advance(300 * time.Millisecond)
		if a := got(t, first, "the first waiter"); a.err != nil || !a.d.Allowed {
			t.Fatalf("first waiter: %s, %v; want admitted", describe(a.d), a.err)
		}
		// Denied again with retry-after 1 s: 1.3 s in all, past the wait.
		a := got(t, second, "the second waiter")
		if o := mustOutcome(t, a.d, "per-second"); a.err != nil || a.d.Allowed || o.RetryAfter != time.Second || a.d.Waited != 300*time.Millisecond {
			t.Fatalf("second waiter: %s waited %v, %v; want denied after 300ms with retry-after 1s", describe(a.d), a.d.Waited, a.err)
		}
		if n := testkit.Metric(t, e.reg, "tokenlimit_waits_total", "outcome", "denied"); n != 1 {
			t.Errorf("tokenlimit_waits_total{outcome=denied} = %v, want 1", n)
		}
		if r := e.remaining(u, "per-second"); r != 0 {
			t.Errorf("remaining %d, want 0: the first waiter's charge alone", r)
		}
	})
}
