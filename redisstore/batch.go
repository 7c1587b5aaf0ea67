package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// Checks are batched in lanes (lane.go), one per Redis Cluster slot (one
// in all when not on a Cluster): a batch call decides its checks in order,
// each all or nothing (check.lua).

// checkJob is one check made through a lane.
type checkJob struct {
	queuedCall
	items   []tokenlimit.Item
	results []tokenlimit.Result
	// callerTime decides at now even when the store decides at the
	// server's time: a Cluster check's later slots decide at the first's.
	callerTime bool
	at         time.Time
	// out is a detached job's caller's results; results is then ownResults.
	out []tokenlimit.Result
	// ownItems and ownResults are the arrays of a detached job's items and
	// results, kept from use to use.
	ownItems   []tokenlimit.Item
	ownResults []tokenlimit.Result
}

func newCheckJob() *checkJob { return &checkJob{queuedCall: queuedCall{done: make(chan struct{}, 1)}} }

func (j *checkJob) call() *queuedCall { return &j.queuedCall }
func (j *checkJob) size() int         { return len(j.items) }

func (j *checkJob) detach() {
	j.ownItems = append(j.ownItems[:0], j.items...)
	j.ownResults = append(j.ownResults[:0], make([]tokenlimit.Result, len(j.results))...)
	j.items, j.out, j.results = j.ownItems, j.results, j.ownResults
}

func (j *checkJob) deliver() { copy(j.out, j.results) }

func (j *checkJob) reset() {
	clear(j.ownItems) // keep no key alive in the pool
	*j = checkJob{queuedCall: queuedCall{done: j.done}, ownItems: j.ownItems[:0], ownResults: j.ownResults[:0]}
}

// batchers holds one check lane per Redis Cluster slot (one in all when not
// on a Cluster), created when first used.
type batchers struct {
	slots []atomic.Pointer[lane[*checkJob]]
}

func newBatchers(cluster bool) *batchers {
	n := 1
	if cluster {
		n = clusterSlots
	}
	return &batchers{slots: make([]atomic.Pointer[lane[*checkJob]], n)}
}

func (bs *batchers) get(s *Store, slot int) *lane[*checkJob] {
	p := &bs.slots[slot%len(bs.slots)]
	if l := p.Load(); l != nil {
		return l
	}
	p.CompareAndSwap(nil, newLane("check", newCheckJob, s.checkJobAlone, s.checkMany))
	return p.Load()
}

// checkBatched decides valid items, which share a slot, through the slot's
// lane: directly if a call is free, else in the next batch call.
func (s *Store) checkBatched(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	slot := 0
	if s.cluster {
		slot = keySlot(s.Key(items[0].Key, items[0].Limit.Algorithm))
	}
	l := s.batch.get(s, slot)
	j := l.get()
	j.ctx, j.now, j.items, j.results = ctx, now, items, results
	if err := l.do(j); err != nil {
		return now, err
	}
	at, err := j.at, j.err
	l.put(j)
	if err != nil {
		return now, err
	}
	return at, nil
}

// checkJobAlone decides a check in a call of its own.
func (s *Store) checkJobAlone(j *checkJob) {
	j.at, j.err = s.checkOnce(j.ctx, j.now, j.items, j.results)
}

// callBuffers are what a call is built in, reused from call to call (a
// lane's batch calls, and a pool's lone calls: callAlone): the call's keys
// and arguments (the client copies the slices into its command), the
// keys' bytes, the buffer its packed argument is built in (the argument is
// a copy) and its distinct limits.
type callBuffers struct {
	keys    []string
	args    []string
	keyData callKeys
	packed  []byte
	limits  callLimits
}

// release drops the strings of the last call, so that a pooled buffer
// keeps none of a caller's keys alive.
func (b *callBuffers) release() {
	clear(b.keys)
	clear(b.args)
}

// checkMany runs check.lua on jobs and writes each job's results and
// decision time, building the call in bufs.
func (s *Store) checkMany(ctx context.Context, jobs []*checkJob, bufs *callBuffers) error {
	keys, args := s.packChecks(jobs, bufs)
	reply, err := s.run(ctx, checkSc, keys, args)
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
		if s.caller || j.callerTime {
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

// packChecks is the keys and arguments of check.lua for jobs, built
// in bufs.
func (s *Store) packChecks(jobs []*checkJob, bufs *callBuffers) (keys, args []string) {
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
	packed := limits.appendTo(appendArray(slices.Grow(bufs.packed[:0], 5+nv*5), nv))
	refs := limits.refs
	for _, j := range jobs {
		n := len(j.items)
		packed = appendInt(appendInt(packed, s.packedAt(j.now, j.callerTime)), int64(n))
		packed = appendRefs(packed, j.items, refs[:n])
		refs = refs[n:]
	}
	keys = bufs.keyData.appendTo(slices.Grow(bufs.keys[:0], nk))
	args = append(bufs.args[:0], s.padMs, string(packed))
	bufs.keys, bufs.packed, bufs.args = keys, packed, args
	return keys, args
}

// packedAt is a job's decision time as the Lua takes it: now in µs when
// the store decides at the caller's time or callerTime is set, else
// serverTime.
func (s *Store) packedAt(now time.Time, callerTime bool) int64 {
	if s.caller || callerTime {
		return now.UnixMicro()
	}
	return serverTime
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
