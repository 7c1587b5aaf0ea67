package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// A lane batches one kind of call: checks (one lane per Cluster slot,
// batch.go), reservations and settlements (records.go). While a call
// is in flight the jobs that arrive queue, and the next call makes all of
// them, in order, each as a call of its own would: one call's fixed cost
// (the invocation, TIME, building the script's functions) is shared by
// every job in it. A batch is whatever queued meanwhile, so a lone caller
// waits for nothing.
//
// The rules, the same for every kind of job:
//   - A caller that finds one of batchLanes calls free makes its job in a
//     call of its own, in its own goroutine, with its own slices.
//   - Otherwise its job is queued detached (laneJob.detach): it holds
//     copies of what the caller owns, so that nothing a caller owns is read
//     or written after its call returns, even if it gave up while its job
//     was queued or in flight. The caller copies the outcome out
//     (laneJob.deliver) only while it still waits.
//   - A caller whose context ends stops waiting and returns its context's
//     error; the job is the lane's from then on and is not reused (the
//     lane may still make it, as a call cut off in flight may).
//   - A lane's call is followed by a goroutine that makes the queued jobs,
//     call after call, until none is queued (one goroutine per busy spell
//     of a lane, not one per call), yielding once after each call.
//   - A batch call's context ends when the last of its callers' could
//     (batchContext); a job whose caller gave up before its call is left
//     out.
//   - Jobs and their wake-up channels come from the lane's pool and go
//     back to it once their callers have their outcome.

// Bounds of one batch call.
const (
	// maxBatchItems bounds the items of one batch call (a job is never
	// split, so a call holds at least one). check.lua puts the call's
	// keys, up to two per item, on Lua's stack at once, which holds about
	// 8,000.
	maxBatchItems = 128
	// batchLanes is how many calls one lane keeps in flight: while one call
	// is on the wire or in Redis, the next can be formed and sent.
	batchLanes = 2
)

// laneJob is what a lane queues: a check, a reservation or a settlement.
type laneJob interface {
	call() *queuedCall
	// size is the job's items, which bound a batch.
	size() int
	// detach makes the job hold copies of what its caller owns (its items,
	// its request's slices and pointers) and outputs of its own.
	detach()
	// deliver copies a detached job's outputs to its caller's.
	deliver()
	// reset empties the job for reuse, keeping its arrays and channel but
	// nothing of its caller's.
	reset()
}

// queuedCall is the part every job has. err is its outcome's error; done
// receives one value when the job is made (buffered, so the lane never
// blocks on a caller that gave up); jobs is how many jobs the call that
// made it carried.
type queuedCall struct {
	ctx  context.Context
	now  time.Time
	err  error
	jobs int
	done chan struct{}
}

// made wakes the job's caller. After it the lane must not touch the job.
func (c *queuedCall) made() { c.done <- struct{}{} }

// lane queues one kind of job. alone makes a job in a call of its own,
// many several in one call, built in bufs; each writes the jobs' outcomes
// into the jobs (many's error is every job's).
type lane[J laneJob] struct {
	mu      sync.Mutex
	running int // calls in flight
	queue   []J

	alone func(J)
	many  func(ctx context.Context, jobs []J, bufs *callBuffers) error
	op    string // "check", "reserve" or "settle", for errors

	jobs    sync.Pool // of J
	batches sync.Pool // of *laneBatch[J]
}

// newLane returns a lane whose pool makes jobs with newJob.
func newLane[J laneJob](op string, newJob func() J, alone func(J), many func(context.Context, []J, *callBuffers) error) *lane[J] {
	l := &lane[J]{alone: alone, many: many, op: op}
	l.jobs.New = func() any { return newJob() }
	l.batches.New = func() any { return new(laneBatch[J]) }
	return l
}

// get returns a job from the pool, for do.
func (l *lane[J]) get() J { return l.jobs.Get().(J) }

// put returns to the pool a job whose do returned nil.
func (l *lane[J]) put(j J) {
	j.reset()
	l.jobs.Put(j)
}

// do makes j directly if a call is free, else in a batch call. On nil j
// holds its outcome and is the caller's again (to put back). On an error,
// the context's once the caller gave up waiting, j is the lane's: the
// batch may still make it, as a call cut off in flight may.
func (l *lane[J]) do(j J) error {
	l.mu.Lock()
	if l.running < batchLanes {
		l.running++
		l.mu.Unlock()
		l.alone(j)
		l.next()
		observeBatch(j.call().ctx, 1)
		return nil
	}
	j.detach()
	l.queue = append(l.queue, j)
	l.mu.Unlock()
	return l.wait(j)
}

// wait returns once j is made, or with an error as soon as its context
// ends.
func (l *lane[J]) wait(j J) error {
	c := j.call()
	if ended := c.ctx.Done(); ended != nil {
		select {
		case <-c.done:
		case <-ended:
			return fmt.Errorf("redisstore: %s: %w", l.op, context.Cause(c.ctx))
		}
	} else {
		<-c.done
	}
	j.deliver()
	observeBatch(c.ctx, c.jobs)
	return nil
}

// laneBatch is what a lane's goroutine reuses from one batch call to the
// next, and from one busy spell to the next (lane.batches): the call's
// jobs, their contexts and the buffers the call is built in.
type laneBatch[J laneJob] struct {
	jobs []J
	ctxs []context.Context
	bufs callBuffers
}

// next makes the queued jobs in a goroutine after a lane's call, or frees
// the lane if nothing is queued.
func (l *lane[J]) next() {
	b := l.batches.Get().(*laneBatch[J])
	if !l.take(b) {
		l.batches.Put(b)
		return
	}
	go l.run(b)
}

// run makes b.jobs, then the jobs queued meanwhile, call after call, until
// none is queued. After a call it yields once before taking the queue, so
// that the callers it has just woken, runnable on its processor, can queue
// their next jobs first. Without that it took the one or two that had, or
// found none and freed the lane, and the next caller took that lane alone:
// most calls carried one job while the other lane carried the rest. The
// yield is no timer: with nothing else runnable it returns at once, and a
// lone caller never gets here.
func (l *lane[J]) run(b *laneBatch[J]) {
	for {
		l.make(b)
		clear(b.jobs)
		runtime.Gosched()
		if !l.take(b) {
			l.batches.Put(b)
			return
		}
	}
}

// take moves the jobs of the lane's next call from the queue into b.jobs
// (in order, up to maxBatchItems items, at least one job) and reports
// true, or frees the lane and reports false if nothing is queued.
func (l *lane[J]) take(b *laneBatch[J]) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) == 0 {
		l.running--
		return false
	}
	n, items := 0, 0
	for n < len(l.queue) && (n == 0 || items+l.queue[n].size() <= maxBatchItems) {
		items += l.queue[n].size()
		n++
	}
	b.jobs = append(b.jobs[:0], l.queue[:n]...)
	clear(l.queue[copy(l.queue, l.queue[n:]):])
	l.queue = l.queue[:len(l.queue)-n]
	return true
}

// make makes b.jobs in one call (one in a call of its own) and wakes their
// callers. A job whose caller gave up is left out.
func (l *lane[J]) make(b *laneBatch[J]) {
	live := b.jobs[:0]
	for _, j := range b.jobs {
		if c := j.call(); c.ctx.Err() != nil {
			c.err = fmt.Errorf("redisstore: %s: %w", l.op, context.Cause(c.ctx))
			c.made()
			continue
		}
		live = append(live, j)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		l.alone(live[0])
		live[0].call().jobs = 1
		live[0].call().made()
		return
	}
	ctxs := b.ctxs[:0]
	for _, j := range live {
		ctxs = append(ctxs, j.call().ctx)
	}
	ctx, cancel := batchContext(ctxs)
	defer cancel()
	clear(ctxs)
	b.ctxs = ctxs
	err := l.many(ctx, live, &b.bufs)
	for _, j := range live {
		c := j.call()
		if err != nil {
			c.err = err
		}
		c.jobs = len(live)
		c.made()
	}
}

// WithBatchObserver returns a copy of ctx whose calls to a Store report to
// observe how many jobs (checks, reservations or settlements) the Redis
// call that made each of them carried: 1 for a call of its own, more for a
// job that queued behind the calls in flight and went out with others. A
// tracer records it beside the store call's span. observe runs in the
// caller's goroutine before the store call returns, once per job made (a
// Cluster check across k slots makes k jobs), never for a job whose caller
// gave up or that an unbatched store made; it must not block.
func WithBatchObserver(ctx context.Context, observe func(jobs int)) context.Context {
	return context.WithValue(ctx, batchObserverKey{}, observe)
}

type batchObserverKey struct{}

// observeBatch reports jobs to ctx's batch observer, if it has one.
func observeBatch(ctx context.Context, jobs int) {
	if observe, ok := ctx.Value(batchObserverKey{}).(func(int)); ok {
		observe(jobs)
	}
}

// batchContext is the context of a batch call made for callers with
// contexts ctxs: it ends when the last of them could (the latest deadline;
// none if one has none), so one caller giving up does not fail the others.
// Contexts that end together (one Done channel and one deadline, such as a
// context shared by callers, or none that can end) need no context of the
// call's own: it takes the first.
func batchContext(ctxs []context.Context) (context.Context, context.CancelFunc) {
	if endTogether(ctxs) {
		return ctxs[0], func() {}
	}
	var latest time.Time
	for _, ctx := range ctxs {
		d, ok := ctx.Deadline()
		if !ok {
			return context.WithoutCancel(ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(ctxs[0]), latest)
}

// endTogether reports whether the contexts share one Done channel (or all
// have none) and one deadline (or all have none).
func endTogether(ctxs []context.Context) bool {
	done := ctxs[0].Done()
	at, ok := ctxs[0].Deadline()
	for _, ctx := range ctxs[1:] {
		if d, has := ctx.Deadline(); ctx.Done() != done || has != ok || !d.Equal(at) {
			return false
		}
	}
	return true
}

// loneCall is what a job made in a call of its own (not batched: a lone
// caller's, or an unbatched or Cluster store's) is built in, kept from
// call to call in a pool of the store's (Store.lone): a call of one job
// needs a batch call's buffers, and it is the common case (BenchmarkCheck's
// limits=1/callers=1: 14 allocations a check without it, 6 with it). The
// client copies the keys and arguments into its command, so the buffers
// are free again once the call returns.
type loneCall[J any] struct {
	job  J
	jobs [1]*J
	bufs callBuffers
}

// callAlone makes job in a call of its own with many (a lane's batch
// call, given one job), built in a loneCall from pool, and returns the job
// as many left it (its outcome) and many's error.
func callAlone[J any](ctx context.Context, pool *sync.Pool, job J, many func(context.Context, []*J, *callBuffers) error) (J, error) {
	c, _ := pool.Get().(*loneCall[J])
	if c == nil {
		c = new(loneCall[J])
	}
	c.job = job
	c.jobs[0] = &c.job
	err := many(ctx, c.jobs[:], &c.bufs)
	done := c.job
	var none J
	c.job = none // keep nothing of the caller's in the pool
	c.bufs.release()
	pool.Put(c)
	return done, err
}
