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
	// noted are the record's noted items when Settled (settle.lua reads
	// them in any case); the caller copies them to req.Noted.
	noted []tokenlimit.Noted
}

func (j *settleJob) call() *queuedCall { return &j.queuedCall }
func (j *settleJob) size() int         { return 1 }

func (j *settleJob) detach() {
	j.req.Noted = nil // read by the caller from j.noted, never written by the lane
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

// settleBatched makes a settlement through the store's lane, returning
// its noted items too (settleJob.noted).
func (s *Store) settleBatched(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, []tokenlimit.Noted, error) {
	l := s.records.settles
	j := l.get()
	j.ctx, j.now, j.req = ctx, now, req
	if err := l.do(j); err != nil {
		return 0, nil, err
	}
	status, noted, err := j.status, j.noted, j.err
	l.put(j) // reset drops j.noted: the slice is the caller's
	return status, noted, err
}

// reserveJobAlone makes a lane's reservation in a call of its own.
func (s *Store) reserveJobAlone(j *reserveJob) { j.outcome, j.err = s.reserveAt(j.ctx, *j) }

// settleJobAlone makes a lane's settlement in a call of its own.
func (s *Store) settleJobAlone(j *settleJob) { j.status, j.noted, j.err = s.settleAt(j.ctx, *j) }

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
// job, built in pooled buffers. It returns the record's noted items too
// (settleJob.noted), in a slice of their own.
func (s *Store) settleAt(ctx context.Context, j settleJob) (tokenlimit.SettleStatus, []tokenlimit.Noted, error) {
	done, err := callAlone(ctx, &s.lone.settles, j, s.settleMany)
	if err != nil {
		return 0, nil, err
	}
	return done.status, done.noted, nil
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
	nk, nv, ns := 0, 0, 0
	for _, j := range jobs {
		nk += 1 + 2*len(j.req.Items)
		nv += 4 + 3*len(j.req.Items) + 2*notes(j.req)
		for _, it := range j.req.Items {
			limits.add(it.Limit)
		}
		bufs.keyData.addRecord(s, j.slot, j.req.ID)
		bufs.keyData.add(s, j.req.Items)
	}
	packed := limits.appendTo(appendArray(slices.Grow(bufs.packed[:0], 5+(nv+1+4*len(limits.limits))*5+ns), nv+1+4*len(limits.limits)))
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
		packed = appendInt(packed, int64(notes(j.req)))
		for i, note := range j.req.Notes {
			if note != "" {
				packed = appendString(appendInt(packed, int64(i+1)), note)
				ns += len(note)
			}
		}
		args = append(args, j.digest)
	}
	args[1] = string(packed)
	keys = bufs.keyData.appendTo(slices.Grow(bufs.keys[:0], nk))
	bufs.keys, bufs.packed, bufs.args = keys, packed, args
	return keys, args
}

// notes returns how many of req's items have a note.
func notes(req tokenlimit.ReserveRequest) int {
	n := 0
	for _, note := range req.Notes {
		if note != "" {
			n++
		}
	}
	return n
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
	r := 0
	for _, j := range jobs {
		if r, err = j.read(reply, r); err != nil {
			return fmt.Errorf("redisstore: settle: reply of %d values for %d settlements: %w", len(reply), len(jobs), err)
		}
	}
	if r != len(reply) {
		return fmt.Errorf("redisstore: settle: reply has %d values, want %d", len(reply), r)
	}
	return nil
}

// read reads the job's status and noted items from reply[r:] (settle.lua's
// form) and returns the index after them.
func (j *settleJob) read(reply []int64, r int) (int, error) {
	if r+1 >= len(reply) {
		return r, errShortReply
	}
	st, n := reply[r], reply[r+1]
	if st < int64(tokenlimit.Settled) || st > int64(tokenlimit.UnknownReservation) {
		return r, fmt.Errorf("unexpected status %d", st)
	}
	j.status, r = tokenlimit.SettleStatus(st), r+2
	for range n {
		var note string
		var err error
		if note, r, err = readNote(reply, r); err != nil {
			return r, err
		}
		if r+5 >= len(reply) {
			return r, errShortReply
		}
		v := reply[r : r+6]
		j.noted = append(j.noted, tokenlimit.Noted{Note: note, Result: tokenlimit.Result{
			Allowed: v[0] == 1, CostExceedsLimit: v[1] == 1, Remaining: v[2],
			RetryAfter: time.Duration(v[3]) * time.Microsecond, ResetAfter: time.Duration(v[4]) * time.Microsecond, Limit: v[5],
		}})
		r += 6
	}
	return r, nil
}

// readNote reads a note from reply[r:] (put_note's form, record.lua: its
// length, then 6 bytes per value) and returns the index after it.
func readNote(reply []int64, r int) (string, int, error) {
	if r >= len(reply) || reply[r] < 0 || reply[r] > tokenlimit.MaxNoteLength {
		return "", r, errShortReply
	}
	n := int(reply[r])
	r++
	if r+(n+5)/6 > len(reply) {
		return "", r, errShortReply
	}
	b := make([]byte, n)
	for i := 0; i < n; i += 6 {
		v, w := reply[r], min(6, n-i)
		for k := w - 1; k >= 0; k-- {
			b[i+k] = byte(v)
			v >>= 8
		}
		r++
	}
	return string(b), r, nil
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
