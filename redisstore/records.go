package redisstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// Reservations and settlements are made as checks are (lane.go): one Lua
// entry point each (reserve.lua, settle.lua) that makes several in one
// call, in order, each as a call of its own would; a lone one is a call of
// one (the common case, built in pooled buffers: callAlone), and those
// that queue behind the calls in flight share the next call. Lanes are not
// used on Redis Cluster, where each reservation takes a call per slot. A
// call is retried once after a broken connection (runIdempotent): each of
// its reservations and settlements is idempotent by id, so a retry replays
// what the first attempt recorded.

// reserveJob is one reservation: req's items (sharing a slot on Cluster)
// checked, charged and recorded.
type reserveJob struct {
	queuedCall
	req tokenlimit.ReserveRequest
	// digest is storekit.Digest(req), computed once by the caller (a Cluster
	// reservation's parts share their request's).
	digest string
	// slot is, on Cluster, the slot of the job's record (slotRecordKey).
	slot uint16
	// callerTime decides at now even when the store decides at the
	// server's time: a Cluster reservation's later slots decide at the
	// first's.
	callerTime bool
	results    []tokenlimit.Result
	outcome    tokenlimit.ReserveOutcome
	out        []tokenlimit.Result // a detached job's caller's results
}

func (j *reserveJob) call() *queuedCall { return &j.queuedCall }
func (j *reserveJob) size() int         { return len(j.req.Items) }

func newReserveJob() *reserveJob {
	return &reserveJob{queuedCall: queuedCall{done: make(chan struct{}, 1)}}
}

func (j *reserveJob) detach() {
	j.req.Items, j.req.Rules = slices.Clone(j.req.Items), slices.Clone(j.req.Rules)
	j.out, j.results = j.results, make([]tokenlimit.Result, len(j.results))
}

func (j *reserveJob) deliver() { copy(j.out, j.results) }

func (j *reserveJob) reset() { *j = reserveJob{queuedCall: queuedCall{done: j.done}} }

// settleJob is one settlement of the record of req.ID.
type settleJob struct {
	queuedCall
	req tokenlimit.SettleRequest
	// slot is, on Cluster, the slot of the record (slotRecordKey).
	slot   uint16
	status tokenlimit.SettleStatus
}

func (j *settleJob) call() *queuedCall { return &j.queuedCall }
func (j *settleJob) size() int         { return 1 }

func (j *settleJob) detach() {
	if j.req.Spend != nil {
		spend := *j.req.Spend
		j.req.Spend = &spend
	}
	j.req.Measures = slices.Clone(j.req.Measures)
}

func (j *settleJob) deliver() {}

func newSettleJob() *settleJob {
	return &settleJob{queuedCall: queuedCall{done: make(chan struct{}, 1)}}
}

func (j *settleJob) reset() { *j = settleJob{queuedCall: queuedCall{done: j.done}} }

// recordLanes are a store's lanes of reservations and settlements.
type recordLanes struct {
	reserves *lane[*reserveJob]
	settles  *lane[*settleJob]
}

func newRecordLanes(s *Store) *recordLanes {
	return &recordLanes{
		reserves: newLane("reserve", newReserveJob, s.reserveJobAlone, s.reserveMany),
		settles:  newLane("settle", newSettleJob, s.settleJobAlone, s.settleMany),
	}
}

// reserveBatched makes a reservation through the store's lane.
func (s *Store) reserveBatched(ctx context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	l := s.records.reserves
	j := l.get()
	j.ctx, j.now, j.req, j.digest, j.results = ctx, now, req, storekit.Digest(req), results
	if err := l.do(j); err != nil {
		return tokenlimit.ReserveOutcome{}, err
	}
	out, err := j.outcome, j.err
	l.put(j)
	return out, err
}

// settleBatched makes a settlement through the store's lane.
func (s *Store) settleBatched(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	l := s.records.settles
	j := l.get()
	j.ctx, j.now, j.req = ctx, now, req
	if err := l.do(j); err != nil {
		return 0, err
	}
	status, err := j.status, j.err
	l.put(j)
	return status, err
}

// reserveJobAlone makes a lane's reservation in a call of its own.
func (s *Store) reserveJobAlone(j *reserveJob) { j.outcome, j.err = s.reserveAt(j.ctx, *j) }

// settleJobAlone makes a lane's settlement in a call of its own.
func (s *Store) settleJobAlone(j *settleJob) { j.status, j.err = s.settleAt(j.ctx, *j) }

// reserveAt makes j's reservation in a call of its own: reserve.lua with
// one job, built in pooled buffers.
func (s *Store) reserveAt(ctx context.Context, j reserveJob) (tokenlimit.ReserveOutcome, error) {
	done, err := callAlone(ctx, &s.lone.reserves, j, s.reserveMany)
	if err != nil {
		return tokenlimit.ReserveOutcome{}, err
	}
	return done.outcome, nil
}

// settleAt makes j's settlement in a call of its own: settle.lua with one
// job, built in pooled buffers.
func (s *Store) settleAt(ctx context.Context, j settleJob) (tokenlimit.SettleStatus, error) {
	done, err := callAlone(ctx, &s.lone.settles, j, s.settleMany)
	if err != nil {
		return 0, err
	}
	return done.status, nil
}

// undoAt cancels the record of j's settlement and deletes it, in a call of
// its own (undoMany).
func (s *Store) undoAt(ctx context.Context, j settleJob) error {
	j.req.Cancel = true
	_, err := callAlone(ctx, &s.lone.settles, j, s.undoMany)
	return err
}

// reserveMany runs reserve.lua on jobs and writes each job's outcome and
// results, building the call in bufs.
func (s *Store) reserveMany(ctx context.Context, jobs []*reserveJob, bufs *callBuffers) error {
	keys, args := s.packReserves(jobs, bufs)
	reply, err := s.runIdempotent(ctx, reserveSc, keys, args)
	if err != nil {
		return fmt.Errorf("redisstore: reserve: %w", err)
	}
	r := 0
	for _, j := range jobs {
		if r, err = j.read(reply, r); err != nil {
			return fmt.Errorf("redisstore: reserve: reply of %d values for %d reservations: %w", len(reply), len(jobs), err)
		}
	}
	if r != len(reply) {
		return fmt.Errorf("redisstore: reserve: reply has %d values, want %d", len(reply), r)
	}
	return nil
}

// read reads the job's outcome and results from reply[r:] (reserve.lua's
// form) and returns the index after them.
func (j *reserveJob) read(reply []int64, r int) (int, error) {
	if r+1 >= len(reply) {
		return r, errShortReply
	}
	j.outcome = tokenlimit.ReserveOutcome{Status: tokenlimit.ReserveStatus(reply[r+1]), At: time.UnixMicro(reply[r])}
	switch j.outcome.Status {
	case tokenlimit.Conflict, tokenlimit.Closed:
		storekit.NoCharge(j.req.Items, j.results)
		return r + 2, nil
	case tokenlimit.Reserved, tokenlimit.Replayed, tokenlimit.Denied:
		return readResults(j.req.Items, j.results, reply, r+2)
	}
	return r, fmt.Errorf("unknown status %d", reply[r+1])
}

// packReserves is the keys and arguments of reserve.lua for jobs, built in
// bufs.
func (s *Store) packReserves(jobs []*reserveJob, bufs *callBuffers) (keys, args []string) {
	limits := &bufs.limits
	limits.reset()
	nk, nv := 0, 0
	for _, j := range jobs {
		nk += 1 + 2*len(j.req.Items)
		nv += 3 + 3*len(j.req.Items)
		for _, it := range j.req.Items {
			limits.add(it.Limit)
		}
		bufs.keyData.addRecord(s, j.slot, j.req.ID)
		bufs.keyData.add(s, j.req.Items)
	}
	packed := limits.appendTo(appendArray(slices.Grow(bufs.packed[:0], 5+(nv+1+4*len(limits.limits))*5), nv+1+4*len(limits.limits)))
	args = append(bufs.args[:0], s.padMs, "")
	refs := limits.refs
	for _, j := range jobs {
		n := len(j.req.Items)
		packed = appendInt(appendInt(appendInt(packed, s.packedAt(j.now, j.callerTime)), int64(n)), j.req.TTL.Microseconds())
		packed = appendRefs(packed, j.req.Items, refs[:n])
		refs = refs[n:]
		for i := range n {
			packed = appendInt(packed, int64(storekit.Rule(j.req, i)))
		}
		args = append(args, j.digest)
	}
	args[1] = string(packed)
	keys = bufs.keyData.appendTo(slices.Grow(bufs.keys[:0], nk))
	bufs.keys, bufs.packed, bufs.args = keys, packed, args
	return keys, args
}

// settleMany runs settle.lua on jobs and writes each job's status,
// building the call in bufs.
func (s *Store) settleMany(ctx context.Context, jobs []*settleJob, bufs *callBuffers) error {
	return s.settleCall(ctx, jobs, bufs, false)
}

// undoMany settles jobs as cancellations that delete their records,
// undoing a partial Cluster reservation, with undo_settle: settle.lua
// declared to run on a full Redis too (undoSettleEntry).
func (s *Store) undoMany(ctx context.Context, jobs []*settleJob, bufs *callBuffers) error {
	return s.settleCall(ctx, jobs, bufs, true)
}

// settleCall is settleMany, or undoMany if forget.
func (s *Store) settleCall(ctx context.Context, jobs []*settleJob, bufs *callBuffers, forget bool) error {
	sc := settleSc
	if forget {
		sc = undoSettleSc
	}
	keys, args := s.packSettles(jobs, bufs, forget)
	reply, err := s.runIdempotent(ctx, sc, keys, args)
	if err != nil {
		return fmt.Errorf("redisstore: settle: %w", err)
	}
	if len(reply) != len(jobs) {
		return fmt.Errorf("redisstore: settle: reply has %d values, want %d", len(reply), len(jobs))
	}
	for i, j := range jobs {
		if reply[i] < int64(tokenlimit.Settled) || reply[i] > int64(tokenlimit.UnknownReservation) {
			return fmt.Errorf("redisstore: settle: unexpected status %d", reply[i])
		}
		j.status = tokenlimit.SettleStatus(reply[i])
	}
	return nil
}

// packSettles is the keys and arguments of settle.lua for jobs, built in
// bufs; forget deletes each record once refunded, and so does a job's
// SettleRequest.Undo.
func (s *Store) packSettles(jobs []*settleJob, bufs *callBuffers, forget bool) (keys, args []string) {
	nv := 0
	for _, j := range jobs {
		nv += 7 + len(j.req.Measures)
	}
	packed := appendArray(slices.Grow(bufs.packed[:0], 5+nv*9), nv)
	for _, j := range jobs {
		spend := int64(-1)
		if j.req.Spend != nil {
			spend = *j.req.Spend
		}
		packed = appendInt(appendInt(appendInt(packed, s.packedAt(j.now, false)), j.req.Actual), spend)
		packed = appendInt(appendInt(appendInt(packed, flagInt(j.req.Cancel || j.req.Undo)), flagInt(forget || j.req.Undo)), j.req.TTL.Microseconds())
		packed = appendInt(packed, int64(len(j.req.Measures)))
		for _, m := range j.req.Measures {
			packed = appendInt(packed, m)
		}
		bufs.keyData.addRecord(s, j.slot, j.req.ID)
	}
	keys = bufs.keyData.appendTo(slices.Grow(bufs.keys[:0], len(jobs)))
	args = append(bufs.args[:0], s.padMs, string(packed))
	bufs.keys, bufs.packed, bufs.args = keys, packed, args
	return keys, args
}

// flagInt is b as settle.lua takes it: 1 or 0.
func flagInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
