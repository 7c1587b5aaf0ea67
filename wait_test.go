package tokenlimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// waitLimiter is a limiter on the named store at t0+700ms of a fake clock
// that also drives its timers, with one request a second, that second's
// request already charged: the next waits 300 ms.
func waitLimiter(t *testing.T, store string) (*tokenlimit.Limiter, *testkit.Clock, tokenlimit.Limit) {
	t.Helper()
	var st tokenlimit.Store
	if store == testkit.Memory {
		st = testkit.MemStore(t)
	} else {
		st = testkit.RedisStore(t, redistest.Start(t).Addr(), testkit.GoRedis)
	}
	clock := testkit.NewClock(t0.Add(700 * time.Millisecond))
	l, err := tokenlimit.NewLimiter(st, tokenlimit.WithClock(clock.Now), tokenlimit.WithTimer(clock.Timer))
	if err != nil {
		t.Fatal(err)
	}
	limit := tokenlimit.FixedWindowLimit(1, time.Second)
	if r, err := l.Allow(context.Background(), "k", limit); err != nil || !r.Allowed {
		t.Fatalf("first Allow = %+v, %v", r, err)
	}
	return l, clock, limit
}

// waitLater runs Wait in a goroutine; its answer arrives on the channel.
func waitLater(ctx context.Context, l *tokenlimit.Limiter, limit tokenlimit.Limit) <-chan error {
	c := make(chan error, 1)
	go func() {
		r, err := l.Wait(ctx, "k", limit)
		if err == nil && !r.Allowed {
			err = errors.New("Wait returned a denial without an error")
		}
		c <- err
	}()
	return c
}

// TestLimiterWait: Wait sleeps the retry-after on the limiter's timer and
// is admitted then, charged once; a caller whose context ends while it
// waits gets the context's error and charges nothing.
func TestLimiterWait(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		l, clock, limit := waitLimiter(t, store)
		c := waitLater(context.Background(), l, limit)
		testkit.Eventually(t, 10*time.Second, "Wait asleep", func() bool { return clock.Timers() == 1 })
		clock.Advance(299 * time.Millisecond)
		select {
		case err := <-c:
			t.Fatalf("Wait returned %v before the retry-after", err)
		default:
		}
		clock.Advance(time.Millisecond)
		if err := <-c; err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if r, _ := l.AllowN(context.Background(), "k", limit, 0); r.Remaining != 0 {
			t.Fatalf("remaining %d after Wait, want 0", r.Remaining)
		}

		ctx, cancel := context.WithCancel(context.Background())
		c = waitLater(ctx, l, limit)
		testkit.Eventually(t, 10*time.Second, "Wait asleep", func() bool { return clock.Timers() == 1 })
		cancel()
		if err := <-c; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Wait: %v, want context.Canceled", err)
		}
		if n := clock.Timers(); n != 0 {
			t.Errorf("%d timers left after the cancelled Wait, want 0", n)
		}
		clock.Advance(time.Second)
		if r, _ := l.AllowN(context.Background(), "k", limit, 0); r.Remaining != 1 {
			t.Errorf("remaining %d in the next second, want 1: the cancelled Wait charged nothing", r.Remaining)
		}
	})
}

// TestLimiterWaitRefusesAtOnce: a cost above the limit, and a retry-after
// past the context's deadline, fail at once, charging nothing.
func TestLimiterWaitRefusesAtOnce(t *testing.T) {
	t.Parallel()
	testkit.EachStore(t, func(t *testing.T, store string) {
		l, clock, limit := waitLimiter(t, store)
		if _, err := l.WaitN(context.Background(), "k", limit, 2); !errors.Is(err, tokenlimit.ErrCostExceedsLimit) {
			t.Errorf("WaitN(cost 2 of 1): %v, want ErrCostExceedsLimit", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if r, err := l.Wait(ctx, "k", limit); !errors.Is(err, tokenlimit.ErrWaitPastDeadline) || r.RetryAfter != 300*time.Millisecond {
			t.Errorf("Wait with 100 ms left: %+v, %v; want ErrWaitPastDeadline with retry-after 300ms", r, err)
		}
		if n := clock.Timers(); n != 0 {
			t.Errorf("%d timers, want none: nothing waited", n)
		}
	})
}
