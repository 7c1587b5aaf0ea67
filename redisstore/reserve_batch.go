package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// Reservations and settlements are batched as checks are (batch.go): while
// a call is in flight the reservations (or settlements) that arrive queue,
// and the next call makes all of them, in order, each as reserve.lua (or
// settle.lua) makes one: reserve_batch.lua, settle_batch.lua. Not on Redis
// Cluster, where each takes a call per slot. A batch is retried once after
// a broken connection like a lone call: each of its reservations and
// settlements is idempotent by id, so a retry replays what the first
// attempt recorded.

// laneJob is what a lane queues: a reservation or a settlement.
type laneJob interface {
	call() *queuedCall
	size() int // items, which bound a batch
	// detach makes the job hold copies of what its caller owns (the
	// request's slices, its results), so that a lane touches nothing of
	// the caller's after the caller gave up and returned.
	detach()
	// deliver copies a detached job's results to its caller's.
	deliver()
}

// queuedCall is the part every queued job has. err is its outcome's error;
// done is closed when it is made.
type queuedCall struct {
	ctx  context.Context
	now  time.Time
	err  error
	done chan struct{}
}

// lane queues one kind of job; alone makes a job in a call of its own,
// many makes several in one call (each job's outcome in the job).
type lane[J laneJob] struct {
	mu      sync.Mutex
	running int // calls in flight
	queue   []J
	alone   func(J)
	many    func(context.Context, []J) error
	op      string // "reserve" or "settle", for errors
}

// do makes j directly if a lane is free, else in the next batch call. It
// returns the context's error if the caller gave up while j waited (the
// batch may still make it, as a call cut off in flight may: a retry with
// the same id replays it); else j holds the outcome.
func (l *lane[J]) do(j J) error {
	c := j.call()
	l.mu.Lock()
	if l.running < batchLanes {
		l.running++
		l.mu.Unlock()
		l.alone(j)
		l.next()
		return nil
	}
	c.done = make(chan struct{})
	j.detach()
	l.queue = append(l.queue, j)
	l.mu.Unlock()
	select {
	case <-c.done:
		j.deliver()
		return nil
	case <-c.ctx.Done():
		return fmt.Errorf("redisstore: %s: %w", l.op, context.Cause(c.ctx))
	}
}

// next makes the queued jobs in a lane that has just finished a call, or
// frees the lane if nothing is queued. A batch call's lane yields once
// before it looks, as a check's lane does (batcher.run): the callers it
// woke queue their next jobs first.
func (l *lane[J]) next() {
	l.mu.Lock()
	if len(l.queue) == 0 {
		l.running--
		l.mu.Unlock()
		return
	}
	jobs := l.take()
	l.mu.Unlock()
	go func() {
		l.run(jobs)
		runtime.Gosched()
		l.next()
	}()
}

// take removes from the queue the jobs of the next call: in order, up to
// maxBatchItems items. The caller holds mu.
func (l *lane[J]) take() []J {
	n, items := 0, 0
	for n < len(l.queue) && (n == 0 || items+l.queue[n].size() <= maxBatchItems) {
		items += l.queue[n].size()
		n++
	}
	jobs := make([]J, n)
	copy(jobs, l.queue)
	l.queue = append(l.queue[:0], l.queue[n:]...)
	return jobs
}

// run makes jobs in one call (one in a call of its own) and wakes their
// callers. A job whose caller gave up is left out.
func (l *lane[J]) run(jobs []J) {
	live := jobs[:0:0]
	var ctxs []context.Context
	for _, j := range jobs {
		c := j.call()
		if err := c.ctx.Err(); err != nil {
			c.err = fmt.Errorf("redisstore: %s: %w", l.op, context.Cause(c.ctx))
			close(c.done)
			continue
		}
		live = append(live, j)
		ctxs = append(ctxs, c.ctx)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		l.alone(live[0])
		close(live[0].call().done)
		return
	}
	ctx, cancel := batchContext(ctxs)
	defer cancel()
	err := l.many(ctx, live)
	for _, j := range live {
		if c := j.call(); err != nil {
			c.err = err
		}
		close(j.call().done)
	}
}

// reserveJob is one queued reservation.
type reserveJob struct {
	queuedCall
	req     tokenlimit.ReserveRequest
	results []tokenlimit.Result
	outcome tokenlimit.ReserveOutcome
	out     []tokenlimit.Result // a detached job's caller's results
}

func (j *reserveJob) call() *queuedCall { return &j.queuedCall }
func (j *reserveJob) size() int         { return len(j.req.Items) }

func (j *reserveJob) detach() {
	j.req.Items, j.req.Rules = slices.Clone(j.req.Items), slices.Clone(j.req.Rules)
	j.out, j.results = j.results, make([]tokenlimit.Result, len(j.results))
}

func (j *reserveJob) deliver() { copy(j.out, j.results) }

// settleJob is one queued settlement.
type settleJob struct {
	queuedCall
	req    tokenlimit.SettleRequest
	status tokenlimit.SettleStatus
}

func (j *settleJob) call() *queuedCall { return &j.queuedCall }
func (j *settleJob) size() int         { return 1 }

func (j *settleJob) detach() {
	if j.req.Spend != nil {
		spend := *j.req.Spend
		j.req.Spend = &spend
	}
}

func (j *settleJob) deliver() {}

// recordLanes are a store's lanes of reservations and settlements.
type recordLanes struct {
	reserves lane[*reserveJob]
	settles  lane[*settleJob]
}

func newRecordLanes(s *Store) *recordLanes {
	return &recordLanes{
		reserves: lane[*reserveJob]{alone: s.reserveAlone, many: s.reserveMany, op: "reserve"},
		settles:  lane[*settleJob]{alone: s.settleAlone, many: s.settleMany, op: "settle"},
	}
}

// reserveBatched makes a reservation through the store's lane.
func (s *Store) reserveBatched(ctx context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	j := &reserveJob{queuedCall: queuedCall{ctx: ctx, now: now}, req: req, results: results}
	if err := s.records.reserves.do(j); err != nil {
		return tokenlimit.ReserveOutcome{}, err
	}
	return j.outcome, j.err
}

// settleBatched makes a settlement through the store's lane.
func (s *Store) settleBatched(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	j := &settleJob{queuedCall: queuedCall{ctx: ctx, now: now}, req: req}
	if err := s.records.settles.do(j); err != nil {
		return 0, err
	}
	return j.status, j.err
}

// reserveAlone makes one reservation that has a call of its own: with the
// plain reserve script, or with the batch script when a test asks for it
// (Store.batchScriptAlways).
func (s *Store) reserveAlone(j *reserveJob) {
	if s.batchScriptAlways {
		j.err = s.reserveMany(j.ctx, []*reserveJob{j})
		return
	}
	j.outcome, j.err = s.reserveAt(j.ctx, j.now, s.caller, s.RecordKey(j.req.ID), j.req.Digest(), j.req.TTL, j.req.Items, rulesOf(j.req), j.results)
}

// settleAlone is reserveAlone's counterpart for a settlement.
func (s *Store) settleAlone(j *settleJob) {
	if s.batchScriptAlways {
		j.err = s.settleMany(j.ctx, []*settleJob{j})
		return
	}
	j.status, j.err = s.settleAt(j.ctx, j.now, s.RecordKey(j.req.ID), j.req, false)
}

// packedNow is a job's decision time as the batch scripts take it.
func (s *Store) packedNow(now time.Time) int64 {
	if s.caller {
		return now.UnixMicro()
	}
	return serverTime
}

// reserveMany runs reserve_batch.lua on jobs and writes each job's outcome
// and results.
func (s *Store) reserveMany(ctx context.Context, jobs []*reserveJob) error {
	nk, nv := 0, 0
	for _, j := range jobs {
		nk += 2 + len(j.req.Items)
		nv += 3 + 6*len(j.req.Items)
	}
	keys := make([]string, 0, nk)
	args := make([]string, 2, 2+len(jobs))
	packed := appendArray(make([]byte, 0, 5+nv*5), nv)
	for _, j := range jobs {
		packed = appendInt(appendInt(appendInt(packed, s.packedNow(j.now)), int64(len(j.req.Items))), j.req.TTL.Microseconds())
		keys = append(keys, s.RecordKey(j.req.ID))
		for _, it := range j.req.Items {
			keys = s.appendKeys(keys, it.Key, it.Limit.Algorithm)
			packed = appendItem(packed, it.Limit, it.Cost)
		}
		for i := range j.req.Items {
			packed = appendInt(packed, int64(j.req.Rule(i)))
		}
		args = append(args, j.req.Digest())
	}
	args[0], args[1] = s.padMs, string(packed)
	reply, err := s.runIdempotent(ctx, reserveBatchSc, keys, args)
	if err != nil {
		return fmt.Errorf("redisstore: reserve: %w", err)
	}
	r := 0
	for _, j := range jobs {
		if r >= len(reply) || reply[r] < 0 || int(reply[r]) > len(reply)-r-1 {
			return fmt.Errorf("redisstore: reserve batch: reply of %d values ends before the reply of reservation %q", len(reply), j.req.ID)
		}
		n := int(reply[r])
		if j.outcome, j.err = reserveOutcome(j.req.Items, j.results, reply[r+1:r+1+n]); j.err != nil {
			return j.err
		}
		r += 1 + n
	}
	if r != len(reply) {
		return fmt.Errorf("redisstore: reserve batch: reply has %d values, want %d", len(reply), r)
	}
	return nil
}

// settleMany runs settle_batch.lua on jobs and writes each job's status.
func (s *Store) settleMany(ctx context.Context, jobs []*settleJob) error {
	keys := make([]string, len(jobs))
	args := make([]string, 1, 1+5*len(jobs))
	args[0] = s.padMs
	for i, j := range jobs {
		keys[i] = s.RecordKey(j.req.ID)
		spend := ""
		if j.req.Spend != nil {
			spend = strconv.FormatInt(*j.req.Spend, 10)
		}
		now := ""
		if s.caller {
			now = strconv.FormatInt(j.now.UnixMicro(), 10)
		}
		args = append(args, now, strconv.FormatInt(j.req.Actual, 10), flag(j.req.Cancel), strconv.FormatInt(j.req.TTL.Microseconds(), 10), spend)
	}
	reply, err := s.runIdempotent(ctx, settleBatchSc, keys, args)
	if err != nil {
		return fmt.Errorf("redisstore: settle: %w", err)
	}
	if len(reply) != len(jobs) {
		return fmt.Errorf("redisstore: settle batch: reply has %d values, want %d", len(reply), len(jobs))
	}
	for i, j := range jobs {
		if reply[i] < int64(tokenlimit.Settled) || reply[i] > int64(tokenlimit.UnknownReservation) {
			return fmt.Errorf("redisstore: settle batch: unexpected status %d", reply[i])
		}
		j.status = tokenlimit.SettleStatus(reply[i])
	}
	return nil
}
