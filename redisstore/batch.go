package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// Batching: while a check's script call is in flight, the checks that
// arrive queue, and the next call decides all of them, in order, each all
// or nothing (check_batch.lua): one call's fixed cost (the invocation, TIME,
// building the script's functions) is shared by every check in it. A batch
// is whatever queued meanwhile, so a lone caller waits for nothing. On
// Redis Cluster checks are batched per slot.

// Bounds of one batch call.
const (
	// maxBatchItems bounds the items of one batch call (a check is never
	// split, so a call holds at least one check). check_batch.lua puts the
	// call's keys, up to two per item, on Lua's stack at once, which holds
	// about 8,000.
	maxBatchItems = 128
	// batchLanes is how many calls one batcher keeps in flight: while one
	// call is on the wire or in Redis, the next can be formed and sent.
	batchLanes = 2
)

// batcher queues the checks of one slot (the whole key space outside a
// Cluster).
type batcher struct {
	s       *Store
	mu      sync.Mutex
	running int // calls in flight
	queue   []*batchJob
}

// batchJob is one queued check. done receives one value when it is
// decided. A queued job holds copies of its caller's items and its own
// results (detach), so that a lane reads and writes nothing of a caller
// that gave up and returned; the caller copies the results out once
// decided. Jobs are reused (jobPool) once their callers have their
// results; a job whose caller gave up waiting is not, since a batch may
// still write to it.
type batchJob struct {
	ctx     context.Context
	now     time.Time
	items   []tokenlimit.Item
	results []tokenlimit.Result
	at      time.Time
	err     error
	done    chan struct{}
	// out is where the caller wants the results, which the lane writes
	// into results, the job's own.
	out []tokenlimit.Result
	// ownItems and ownResults are the arrays of a queued job's items and
	// results, kept from use to use.
	ownItems   []tokenlimit.Item
	ownResults []tokenlimit.Result
}

// detach makes j hold copies of its caller's items and results of its
// own, the caller's results slice kept in out.
func (j *batchJob) detach() {
	j.ownItems = append(j.ownItems[:0], j.items...)
	j.ownResults = append(j.ownResults[:0], make([]tokenlimit.Result, len(j.results))...)
	j.items, j.out, j.results = j.ownItems, j.results, j.ownResults
}

// release empties j, keeping its arrays but no key, and puts it back in
// the pool.
func (j *batchJob) release() {
	clear(j.ownItems)
	*j = batchJob{done: j.done, ownItems: j.ownItems[:0], ownResults: j.ownResults[:0]}
	jobPool.Put(j)
}

var jobPool = sync.Pool{New: func() any { return &batchJob{done: make(chan struct{}, 1)} }}

// decided wakes j's caller. After it the batch must not touch j.
func (j *batchJob) decided() {
	j.done <- struct{}{}
}

// batchers holds one batcher per Redis Cluster slot (one in all when not on
// a Cluster), created when first used.
type batchers struct {
	slots []atomic.Pointer[batcher]
}

func newBatchers(cluster bool) *batchers {
	n := 1
	if cluster {
		n = clusterSlots
	}
	return &batchers{slots: make([]atomic.Pointer[batcher], n)}
}

func (bs *batchers) get(s *Store, slot int) *batcher {
	p := &bs.slots[slot%len(bs.slots)]
	if b := p.Load(); b != nil {
		return b
	}
	p.CompareAndSwap(nil, &batcher{s: s})
	return p.Load()
}

// checkBatched decides valid items, which share a slot, through the slot's
// batcher: directly if a lane is free, else in the next batch call.
func (s *Store) checkBatched(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	slot := 0
	if s.cluster {
		slot = keySlot(s.Key(items[0].Key, items[0].Limit.Algorithm))
	}
	b := s.batch.get(s, slot)
	b.mu.Lock()
	if b.running < batchLanes {
		b.running++
		b.mu.Unlock()
		at, err := s.checkAlone(ctx, now, items, results)
		b.next()
		return at, err
	}
	j := jobPool.Get().(*batchJob)
	j.ctx, j.now, j.items, j.results = ctx, now, items, results
	j.detach()
	b.queue = append(b.queue, j)
	b.mu.Unlock()
	return j.wait()
}

// wait returns j's decision once it is made, or an error as soon as j's
// context ends.
func (j *batchJob) wait() (time.Time, error) {
	if done := j.ctx.Done(); done != nil {
		select {
		case <-j.done:
		case <-done:
			// The batch may still decide (and charge) it, as a call cut off
			// in flight may: the caller sees an error either way. j stays
			// out of the pool, as the batch may still write to it.
			return j.now, fmt.Errorf("redisstore: check: %w", context.Cause(j.ctx))
		}
	} else {
		<-j.done
	}
	at, err := j.at, j.err
	copy(j.out, j.results)
	j.release()
	return at, err
}

// next runs the queued checks in a lane that has just finished a call, or
// frees the lane if nothing is queued.
func (b *batcher) next() {
	bufs := bufPool.Get().(*callBuffers)
	if !b.nextJobs(bufs) {
		bufPool.Put(bufs)
		return
	}
	go b.run(bufs)
}

// run decides bufs.jobs, then the checks queued meanwhile, call after call,
// until none is queued: one goroutine per busy spell of a lane, not one per
// call. After a call it yields once before taking the queue, so that the
// callers it has just woken, runnable on its processor, can queue their
// next checks first. Without that it took the one or two that had, or
// found none and freed the lane, and the next caller took that lane alone:
// most calls carried one check while the other lane carried the rest. The
// yield is no timer: with nothing else runnable it returns at once, and a
// lone caller never gets here.
func (b *batcher) run(bufs *callBuffers) {
	for {
		b.s.runBatch(bufs)
		clear(bufs.jobs)
		runtime.Gosched()
		if !b.nextJobs(bufs) {
			bufPool.Put(bufs)
			return
		}
	}
}

// callBuffers are what a lane reuses from one batch call to the next, and
// from one busy spell to the next (bufPool): the call's checks, its keys
// (the client copies the slice into its command), the keys' bytes, the
// buffer its packed argument is built in (the argument is a copy), its
// distinct limits and its callers' contexts.
type callBuffers struct {
	jobs    []*batchJob
	keys    []string
	keyData callKeys
	packed  []byte
	limits  callLimits
	ctxs    []context.Context
}

var bufPool = sync.Pool{New: func() any { return new(callBuffers) }}

// nextJobs takes the checks of a lane's next call into bufs.jobs and
// reports true, or frees the lane and reports false if nothing is queued.
func (b *batcher) nextJobs(bufs *callBuffers) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.running--
		return false
	}
	bufs.jobs = b.take(bufs.jobs)
	return true
}

// take removes from the queue the checks of the next call: in order, up to
// maxBatchItems items, in into's array. The caller holds mu.
func (b *batcher) take(into []*batchJob) []*batchJob {
	n, items := 0, 0
	for n < len(b.queue) && (n == 0 || items+len(b.queue[n].items) <= maxBatchItems) {
		items += len(b.queue[n].items)
		n++
	}
	jobs := append(into[:0], b.queue[:n]...)
	b.queue = append(b.queue[:0], b.queue[n:]...)
	return jobs
}

// runBatch decides bufs.jobs in one call (one check in the plain check
// call) and wakes their callers. A job whose caller gave up is left out
// (bufs.jobs keeps the others).
func (s *Store) runBatch(bufs *callBuffers) {
	live := bufs.jobs[:0]
	for _, j := range bufs.jobs {
		if err := j.ctx.Err(); err != nil {
			j.err = fmt.Errorf("redisstore: check: %w", context.Cause(j.ctx))
			j.decided()
			continue
		}
		live = append(live, j)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		j := live[0]
		j.at, j.err = s.checkAlone(j.ctx, j.now, j.items, j.results)
		j.decided()
		return
	}
	ctxs := bufs.ctxs[:0]
	for _, j := range live {
		ctxs = append(ctxs, j.ctx)
	}
	ctx, cancel := batchContext(ctxs)
	defer cancel()
	clear(ctxs)
	bufs.ctxs = ctxs
	err := s.checkMany(ctx, live, bufs)
	for _, j := range live {
		if err != nil {
			j.at, j.err = j.now, err
		}
		j.decided()
	}
}

// checkAlone decides one check that has a call of its own: with the plain
// check script (smaller, so cheaper to run), or with the batch script when
// a test asks for it (Store.batchScriptAlways).
func (s *Store) checkAlone(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	if !s.batchScriptAlways {
		return s.checkOnce(ctx, now, items, results)
	}
	j := &batchJob{ctx: ctx, now: now, items: items, results: results}
	if err := s.checkMany(ctx, []*batchJob{j}, &callBuffers{}); err != nil {
		return now, err
	}
	return j.at, nil
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

// checkMany runs check_batch.lua on jobs and writes each job's results and
// decision time, building the call in bufs.
func (s *Store) checkMany(ctx context.Context, jobs []*batchJob, bufs *callBuffers) error {
	keys, args := s.packChecks(jobs, bufs)
	reply, err := s.run(ctx, checkBatch, keys, args)
	if err != nil {
		return fmt.Errorf("redisstore: check: %w", err)
	}
	if len(reply) == 0 {
		return errors.New("redisstore: check batch: empty reply")
	}
	// A check decides at the server's time (reply[0]) or at its caller's.
	r := 1
	for _, j := range jobs {
		j.at = time.UnixMicro(reply[0])
		if s.caller {
			j.at = time.UnixMicro(j.now.UnixMicro())
		}
		if r, err = readResults(j.items, j.results, reply, r); err != nil {
			return fmt.Errorf("redisstore: check batch: reply of %d values, too few for %d checks: %w", len(reply), len(jobs), err)
		}
	}
	if r != len(reply) {
		return fmt.Errorf("redisstore: check batch: reply has %d values, want %d", len(reply), r)
	}
	return nil
}

// packChecks is the keys and arguments of check_batch.lua for jobs, built
// in bufs.
func (s *Store) packChecks(jobs []*batchJob, bufs *callBuffers) (keys, args []string) {
	limits := &bufs.limits
	limits.reset()
	nk, nv := 0, 0
	for _, j := range jobs {
		nk += len(j.items) + 1
		nv += 2 + 2*len(j.items)
		for _, it := range j.items {
			limits.add(it.Limit)
		}
		bufs.keyData.add(s, j.items)
	}
	nv += 1 + 4*len(limits.limits)
	packed := appendArray(slices.Grow(bufs.packed[:0], 5+nv*5), nv)
	packed = appendInt(packed, int64(len(limits.limits)))
	for _, l := range limits.limits {
		packed = appendLimit(packed, l)
	}
	item := 0
	for _, j := range jobs {
		packed = appendInt(appendInt(packed, s.packedNow(j.now)), int64(len(j.items)))
		for _, it := range j.items {
			packed = appendInt(appendInt(packed, limits.refs[item]), it.Cost)
			item++
		}
	}
	keys = bufs.keyData.appendTo(slices.Grow(bufs.keys[:0], nk))
	bufs.keys, bufs.packed = keys, packed
	return keys, []string{s.padMs, string(packed)}
}

// clusterSlots is the number of Redis Cluster hash slots.
const clusterSlots = 16384

// keySlot is the Redis Cluster slot of a Redis key: CRC16 (XMODEM) of its
// hash tag, modulo 16384.
func keySlot(key string) int {
	var crc uint16
	for _, c := range []byte(hashTag(key)) {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % clusterSlots)
}
