package tokenlimit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors of WaitN, which charge nothing; test with errors.Is.
var (
	// ErrCostExceedsLimit: the cost is above what the limit can ever admit
	// (Result.CostExceedsLimit); waiting cannot help.
	ErrCostExceedsLimit = errors.New("cost exceeds the limit: waiting cannot help")
	// ErrWaitPastDeadline: the budget would not admit the cost before the
	// context's deadline.
	ErrWaitPastDeadline = errors.New("the budget would not admit the cost before the context's deadline")
)

// Wait is WaitN with a cost of 1.
func (l *Limiter) Wait(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.WaitN(ctx, key, limit, 1)
}

// WaitN charges cost to key's budget under limit, waiting until the budget
// admits it, and returns the admitting Result, as x/time/rate's WaitN does
// for one process: it checks (AllowN), and while denied sleeps the
// Result's RetryAfter on the limiter's timer (WithTimer) and checks again.
// A denied check charges nothing, so nothing is charged until the cost is
// admitted, once: a caller that gives up changes no budget. Callers are
// not queued: another may take the budget first, and WaitN then waits
// again.
//
// It fails at once, charging nothing, with ErrCostExceedsLimit when the
// cost can never fit, and with ErrWaitPastDeadline when ctx has a deadline
// before the budget would admit the cost; it returns ctx's error if ctx
// ends while it waits. The denying Result comes with those errors.
func (l *Limiter) WaitN(ctx context.Context, key string, limit Limit, cost int64) (Result, error) {
	for {
		r, err := l.AllowN(ctx, key, limit, cost)
		switch {
		case err != nil || r.Allowed:
			return r, err
		case r.CostExceedsLimit:
			return r, fmt.Errorf("tokenlimit: wait: %w", ErrCostExceedsLimit)
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < r.RetryAfter {
			return r, fmt.Errorf("tokenlimit: wait %s: %w", r.RetryAfter, ErrWaitPastDeadline)
		}
		if err := l.sleep(ctx, r.RetryAfter); err != nil {
			return r, err
		}
	}
}

// sleep returns once d has passed on the limiter's timer, or with ctx's
// error once ctx ends.
func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	c, stop := l.timer(d)
	defer stop()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newTimer is time.NewTimer as a WithTimer timer.
func newTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}
