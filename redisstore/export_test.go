package redisstore

import (
	"context"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// BatchLanes is how many calls one lane keeps in flight.
const BatchLanes = batchLanes

// QueuedChecks is how many checks wait for a call of s (not on a Cluster).
func QueuedChecks(s *Store) int {
	b := s.batch.get(s, 0)
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// ScriptsOnly makes s run its code as scripts (EVALSHA) even though its
// client can run Redis Functions, so that the suites exercise the fallback.
func ScriptsOnly(s *Store) *Store {
	s.fn = nil
	return s
}

// QueuedReserves is how many reservations wait for a call of s.
func QueuedReserves(s *Store) int {
	l := s.records.reserves
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// QueuedSettles is how many settlements wait for a call of s.
func QueuedSettles(s *Store) int {
	l := s.records.settles
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// CheckInOneCall decides checks (items[i], into results[i]) in one call of
// check.lua, as a batch of len(items) checks that queued together
// would be, each at the server's time unless s decides at the caller's
// (then at now).
func CheckInOneCall(s *Store, now time.Time, items [][]tokenlimit.Item, results [][]tokenlimit.Result) error {
	jobs := make([]*checkJob, len(items))
	for i := range jobs {
		jobs[i] = &checkJob{queuedCall: queuedCall{ctx: context.Background(), now: now}, items: items[i], results: results[i]}
	}
	return s.checkMany(context.Background(), jobs, &callBuffers{})
}

// RefundOnce gives back adjustments (every delta negative) in one call of
// the refund script, as a Cluster check takes back its earlier slots.
func RefundOnce(s *Store, ctx context.Context, now time.Time, adjustments []tokenlimit.Adjustment) error {
	return s.adjustOnce(ctx, now, adjustments, refundSc)
}

// ReserveInOneCall makes reservations (reqs[i], into results[i]) in one
// call, as a batch of len(reqs) reservations that queued together would
// be, at the server's time unless s decides at the caller's (then at now).
func ReserveInOneCall(s *Store, now time.Time, reqs []tokenlimit.ReserveRequest, results [][]tokenlimit.Result) ([]tokenlimit.ReserveOutcome, error) {
	jobs := make([]*reserveJob, len(reqs))
	for i := range jobs {
		jobs[i] = &reserveJob{queuedCall: queuedCall{ctx: context.Background(), now: now}, req: reqs[i], digest: storekit.Digest(reqs[i]), results: results[i]}
	}
	err := s.reserveMany(context.Background(), jobs, &callBuffers{})
	outs := make([]tokenlimit.ReserveOutcome, len(jobs))
	for i, j := range jobs {
		outs[i] = j.outcome
	}
	return outs, err
}

// SettleInOneCall makes settlements in one call, as a batch of len(reqs)
// settlements that queued together would be.
func SettleInOneCall(s *Store, now time.Time, reqs []tokenlimit.SettleRequest) ([]tokenlimit.SettleStatus, error) {
	jobs := make([]*settleJob, len(reqs))
	for i := range jobs {
		jobs[i] = &settleJob{queuedCall: queuedCall{ctx: context.Background(), now: now}, req: reqs[i]}
	}
	err := s.settleMany(context.Background(), jobs, &callBuffers{})
	statuses := make([]tokenlimit.SettleStatus, len(jobs))
	for i, j := range jobs {
		statuses[i] = j.status
	}
	return statuses, err
}
