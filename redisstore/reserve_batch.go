package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// Reservations and settlements are batched in lanes as checks are
// (lane.go): a batch call makes its jobs in order, each as reserve.lua (or
// settle.lua) makes one: reserve_batch.lua, settle_batch.lua. Not on Redis
// Cluster, where each takes a call per slot. A batch is retried once after
// a broken connection like a lone call: each of its reservations and
// settlements is idempotent by id, so a retry replays what the first
// attempt recorded.

// reserveJob is one reservation made through a lane.
type reserveJob struct {
	queuedCall
	req     tokenlimit.ReserveRequest
	results []tokenlimit.Result
	outcome tokenlimit.ReserveOutcome
	out     []tokenlimit.Result // a detached job's caller's results
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

// settleJob is one settlement made through a lane.
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
		reserves: newLane("reserve", newReserveJob, s.reserveAlone, s.reserveMany),
		settles:  newLane("settle", newSettleJob, s.settleAlone, s.settleMany),
	}
}

// reserveBatched makes a reservation through the store's lane.
func (s *Store) reserveBatched(ctx context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	l := s.records.reserves
	j := l.get()
	j.ctx, j.now, j.req, j.results = ctx, now, req, results
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

// reserveAlone makes one reservation that has a call of its own: with the
// plain reserve script, or with the batch script when a test asks for it
// (Store.batchScriptAlways).
func (s *Store) reserveAlone(j *reserveJob) {
	if s.batchScriptAlways {
		j.err = s.reserveMany(j.ctx, []*reserveJob{j}, nil)
		return
	}
	j.outcome, j.err = s.reserveAt(j.ctx, j.now, s.caller, s.RecordKey(j.req.ID), storekit.Digest(j.req), j.req.TTL, j.req.Items, rulesOf(j.req), j.results)
}

// settleAlone is reserveAlone's counterpart for a settlement.
func (s *Store) settleAlone(j *settleJob) {
	if s.batchScriptAlways {
		j.err = s.settleMany(j.ctx, []*settleJob{j}, nil)
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
func (s *Store) reserveMany(ctx context.Context, jobs []*reserveJob, _ *callBuffers) error {
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
			packed = appendInt(packed, int64(storekit.Rule(j.req, i)))
		}
		args = append(args, storekit.Digest(j.req))
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
func (s *Store) settleMany(ctx context.Context, jobs []*settleJob, _ *callBuffers) error {
	keys := make([]string, len(jobs))
	args := make([]string, 1, 1+6*len(jobs))
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
		args = append(args, now, strconv.FormatInt(j.req.Actual, 10), flag(j.req.Cancel), strconv.FormatInt(j.req.TTL.Microseconds(), 10), spend,
			measuresArg(j.req.Measures))
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
