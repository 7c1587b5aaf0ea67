package service

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/tokenlimit/tokenlimit/config"
)

// Waiting instead of refusing (config.Limit.Wait): a request denied only
// by limits that have a wait, each with a retry-after within its wait, is
// held for the longest of those retry-afters and decided again, instead of
// being answered 429 at once. Nothing is charged before that second
// decision, so a caller that gives up while waiting (its context ends)
// leaves every budget as it was. A second denial waits again while the
// total wait stays within every denying limit's wait, and answers the
// denial otherwise.
//
// The waiters of one budget (the key of the denying limit with the longest
// retry-after) are decided again in arrival order, one at a time, at most
// its limit's max_waiting of them in this process; one more is refused at
// once. The order is this process's: a new request that its budget admits
// is not held behind them, and replicas do not share their queues.

// waitQueues holds the requests waiting, per budget key, in arrival order.
// A key is held only while requests wait on it: memory is bounded by the
// requests in flight.
type waitQueues struct {
	mu     sync.Mutex
	queues map[string][]*waiter
}

// waiter is one waiting request; turn is closed when it is first in its
// queue.
type waiter struct{ turn chan struct{} }

// join queues a waiter on key, unless max already wait there.
func (q *waitQueues) join(key string, max int) (*waiter, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	waiters := q.queues[key]
	if len(waiters) >= max {
		return nil, false
	}
	w := &waiter{turn: make(chan struct{})}
	if len(waiters) == 0 {
		close(w.turn)
	}
	if q.queues == nil {
		q.queues = map[string][]*waiter{}
	}
	q.queues[key] = append(waiters, w)
	return w, true
}

// leave takes w off key's queue, giving the turn to the next if w had it.
func (q *waitQueues) leave(key string, w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	waiters := q.queues[key]
	i := slices.Index(waiters, w)
	if i < 0 {
		return
	}
	waiters = slices.Delete(waiters, i, i+1)
	if len(waiters) == 0 {
		delete(q.queues, key)
		return
	}
	if i == 0 {
		close(waiters[0].turn)
	}
	q.queues[key] = waiters
}

// waitPlan is how a denial may wait.
type waitPlan struct {
	key    string        // the queue: the budget of the longest retry-after
	max    int           // that limit's max_waiting
	delay  time.Duration // the longest retry-after of the denying limits
	within time.Duration // the shortest wait of the denying limits
}

// requestWait is the longest Wait of reqs, 0 for none.
func requestWait(reqs []Request) time.Duration {
	var w time.Duration
	for _, r := range reqs {
		w = max(w, r.Wait)
	}
	return w
}

// canWait reports how d, a decision on checks, may wait when waited has
// passed already: it is a denial by the store of enforced limits that all
// have a wait (reqWait, the request's own, replacing theirs when above 0),
// with retry-afters above 0 that, added to waited, stay within every
// one's wait.
func canWait(d Decision, checks []check, waited, reqWait time.Duration) (waitPlan, bool) {
	if d.Allowed || d.Unavailable || d.KeySpaceFull {
		return waitPlan{}, false
	}
	p := waitPlan{within: config.MaxWait}
	for _, o := range d.Limits {
		if o.Shadow || o.Allowed {
			continue
		}
		l := limitOf(checks, &o)
		if l == nil {
			return waitPlan{}, false
		}
		wait, maxWaiting := l.Wait, l.MaxWaiting
		if reqWait > 0 {
			wait = reqWait
			if maxWaiting == 0 {
				maxWaiting = config.DefaultMaxWaiting
			}
		}
		if wait == 0 || o.RetryAfter <= 0 || o.CostExceedsLimit {
			return waitPlan{}, false
		}
		p.within = min(p.within, wait)
		if o.RetryAfter > p.delay {
			p.key, p.max, p.delay = o.Key, maxWaiting, o.RetryAfter
		}
	}
	return p, p.delay > 0 && waited+p.delay <= p.within
}

// limitOf is the limit of the check that o answers, nil if none.
func limitOf(checks []check, o *Outcome) *config.Limit {
	for i := range checks {
		if checks[i].item.Key == o.Key && checks[i].limit.Name == o.Name {
			return checks[i].limit
		}
	}
	return nil
}

// waitAndDecide answers d, a decision on checks, or, if it is a denial that
// may wait (canWait; reqWait is the request's own wait), waits and answers decide's decision again. The wait
// ends early when ctx ends or cancel is closed (nil for none): it answers
// ctx's error (context.Canceled for cancel) and nothing is charged. A
// request whose turn has not come when the shortest wait of the limits
// that first denied it has passed answers its last denial.
func (s *Service) waitAndDecide(ctx context.Context, cancel <-chan struct{}, reqWait time.Duration, checks []check, d Decision, decide func() (Decision, error)) (Decision, error) {
	p, ok := canWait(d, checks, 0, reqWait)
	if !ok {
		return d, nil
	}
	w, ok := s.waiting.join(p.key, p.max)
	if !ok {
		s.metrics.waited("full")
		return d, nil
	}
	defer s.waiting.leave(p.key, w)
	s.metrics.waitingNow.Inc()
	defer s.metrics.waitingNow.Dec()
	deadline, stop := s.opts.Timer(p.within)
	defer stop()
	start, slept := s.opts.Clock(), time.Duration(0)
	for {
		switch err := s.sleep(ctx, cancel, w.turn, p.delay, deadline); {
		case err == errWaitOver:
			s.metrics.waited("denied")
			return d, nil
		case err != nil:
			s.metrics.waited("cancelled")
			return Decision{}, err
		}
		slept += p.delay
		next, err := decide()
		if err != nil {
			return Decision{}, err
		}
		d = next
		d.Waited = max(s.opts.Clock().Sub(start), slept)
		if d.Allowed {
			s.metrics.waited("admitted")
			return d, nil
		}
		if p, ok = canWait(d, checks, d.Waited, reqWait); !ok {
			s.metrics.waited("denied")
			return d, nil
		}
	}
}

// errWaitOver: the wait's deadline passed.
var errWaitOver = errors.New("wait over")

// sleep returns nil once d has passed on the service's timer and turn is
// closed; errWaitOver if deadline fires first; ctx's error once ctx ends,
// context.Canceled once cancel is closed.
func (s *Service) sleep(ctx context.Context, cancel, turn <-chan struct{}, d time.Duration, deadline <-chan time.Time) error {
	timer, stop := s.opts.Timer(d)
	defer stop()
	for timer != nil || turn != nil {
		select {
		case <-timer:
			timer = nil
		case <-turn:
			turn = nil
		case <-deadline:
			// Due at the deadline too, the timer and turn may not have
			// been picked yet.
			if timer != nil {
				select {
				case <-timer:
					timer = nil
				default:
				}
			}
			if turn != nil && closed(turn) {
				turn = nil
			}
			if timer != nil || turn != nil {
				return errWaitOver
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-cancel:
			return context.Canceled
		}
	}
	return nil
}

// closed reports whether c is closed (it is never sent on).
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
