package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

var _ tokenlimit.Reserver = (*Store)(nil)

// RecordKey returns the Redis key of the reservation record of id on a
// standalone or Sentinel Redis: "rl:rv:{<id>}". (On Cluster a reservation
// has one record per slot of its items, "rl:rv:{<the slot's tag>}:<id>",
// found through a pointer in the id's slot.)
func (s *Store) RecordKey(id string) string { return string(s.appendRecordKey(nil, false, 0, id)) }

// appendRecordKey appends the key of id's record to b: RecordKey's, or if
// inSlot its record's in Redis Cluster slot slot.
func (s *Store) appendRecordKey(b []byte, inSlot bool, slot uint16, id string) []byte {
	b = append(append(b, s.prefix...), "rv:{"...)
	if inSlot {
		return append(append(append(b, slotTag(slot)...), "}:"...), id...)
	}
	return append(append(b, id...), '}')
}

// pointerKey is the key, in id's slot, of the pointer to the records of
// id's reservation on Cluster.
func (s *Store) pointerKey(id string) string { return s.prefix + "rvp:{" + id + "}" }

// Reserve implements tokenlimit.Reserver in one script call that checks,
// charges and records, which it may share with other reservations (see
// Options.Unbatched). On Redis Cluster it takes one call to claim the id
// (a pointer in the id's slot) and one per slot of the items; see
// docs/operations.md for what that guarantees.
func (s *Store) Reserve(ctx context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	if err := storekit.ValidateReserve(req, results); err != nil {
		return tokenlimit.ReserveOutcome{}, fmt.Errorf("redisstore: %w", err)
	}
	if s.cluster {
		return s.reserveCluster(ctx, now, req, results)
	}
	if s.records != nil {
		return s.reserveBatched(ctx, now, req, results)
	}
	return s.reserveAt(ctx, reserveJob{queuedCall: queuedCall{ctx: ctx, now: now}, req: req, digest: storekit.Digest(req), results: results})
}

// Settle implements tokenlimit.Reserver in one script call that reads the
// record, applies the differences and marks it settled, which it may share
// with other settlements (see Options.Unbatched). On Redis Cluster it
// takes one call to read the pointer and one per slot of the items.
func (s *Store) Settle(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	if err := req.Validate(); err != nil {
		return 0, fmt.Errorf("redisstore: %w", err)
	}
	var st tokenlimit.SettleStatus
	var noted []tokenlimit.Noted
	var err error
	switch {
	case s.cluster:
		st, noted, err = s.settleCluster(ctx, now, req)
	case s.records != nil:
		st, noted, err = s.settleBatched(ctx, now, req)
	default:
		st, noted, err = s.settleAt(ctx, settleJob{queuedCall: queuedCall{ctx: ctx, now: now}, req: req})
	}
	if req.Noted != nil && err == nil {
		*req.Noted = (*req.Noted)[:0]
		if st == tokenlimit.Settled {
			*req.Noted = append(*req.Noted, noted...)
		}
	}
	return st, err
}

// reserveCluster reserves on Redis Cluster: a pointer in the id's slot
// binds the id to the request and lists the slots of its records, then each
// slot's items are reserved (checked, charged, recorded) in one call each,
// all at the first slot's time. When a later slot denies or fails, the
// slots this call charged are refunded and their records deleted, and so is
// the pointer if this call made it, so that nothing stays charged and the
// id may be tried again.
func (s *Store) reserveCluster(ctx context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	groups := s.slotGroups(req.Items)
	slots := make([]int64, len(groups))
	for g, group := range groups {
		it := req.Items[group[0]]
		slots[g] = int64(keySlot(s.Key(it.Key, it.Limit.Algorithm)))
	}
	digest := storekit.Digest(req)
	claim, err := s.pointer(ctx, now, req.ID, "claim", digest, req.TTL, slots)
	if err != nil {
		return tokenlimit.ReserveOutcome{}, err
	}
	switch st := tokenlimit.ReserveStatus(claim[0]); st {
	case tokenlimit.Conflict, tokenlimit.Closed:
		storekit.NoCharge(req.Items, results)
		return tokenlimit.ReserveOutcome{Status: st, At: now}, nil
	}
	u := undoer{s: s, ctx: ctx, now: now, id: req.ID, ttl: req.TTL, fresh: claim[0] == int64(tokenlimit.Reserved)}
	out := tokenlimit.ReserveOutcome{Status: tokenlimit.Replayed}
	at, callerTime := now, s.caller
	for g, group := range groups {
		part := tokenlimit.ReserveRequest{ID: req.ID, TTL: req.TTL}
		var partResults []tokenlimit.Result
		part.Items, partResults = pick(req.Items, group)
		if len(req.Rules) > 0 {
			part.Rules = make([]tokenlimit.SettleRule, len(group))
			for j, i := range group {
				part.Rules[j] = req.Rules[i]
			}
		}
		if len(req.Notes) > 0 {
			part.Notes = make([]string, len(group))
			for j, i := range group {
				part.Notes[j] = req.Notes[i]
			}
		}
		o, err := s.reserveAt(ctx, reserveJob{queuedCall: queuedCall{ctx: ctx, now: at}, req: part, digest: digest,
			slot: uint16(slots[g]), callerTime: callerTime, results: partResults})
		if err != nil {
			return tokenlimit.ReserveOutcome{}, u.undo(err)
		}
		for j, i := range group {
			results[i] = partResults[j]
		}
		switch o.Status {
		case tokenlimit.Reserved, tokenlimit.Replayed:
			if g == 0 {
				out.At = o.At
			}
			if o.Status == tokenlimit.Reserved {
				out.Status = tokenlimit.Reserved
				u.charged = append(u.charged, uint16(slots[g]))
			}
			at, callerTime = out.At, true
		case tokenlimit.Denied:
			if err := u.undo(nil); err != nil {
				return tokenlimit.ReserveOutcome{}, err
			}
			return tokenlimit.ReserveOutcome{Status: tokenlimit.Denied, At: o.At}, s.peekUncharged(ctx, o.At, req.Items, results, groups, g)
		default: // settled (Closed) meanwhile, or a conflict that the pointer did not see
			if err := u.undo(nil); err != nil {
				return tokenlimit.ReserveOutcome{}, err
			}
			storekit.NoCharge(req.Items, results)
			return o, nil
		}
	}
	return out, nil
}

// undoer takes back a partial Cluster reservation, on a context detached
// from the caller's (whose deadline may be what failed) with the store's
// refund timeout.
type undoer struct {
	s       *Store
	ctx     context.Context
	now     time.Time
	id      string
	ttl     time.Duration
	fresh   bool     // this call made the pointer
	charged []uint16 // slots this call charged
}

func (u *undoer) undo(cause error) error {
	ctx, cancel := u.s.detached(u.ctx)
	defer cancel()
	var err error
	for _, slot := range u.charged {
		if err = u.s.undoAt(ctx, settleJob{queuedCall: queuedCall{ctx: ctx, now: u.now}, req: tokenlimit.SettleRequest{ID: u.id, TTL: u.ttl}, slot: slot}); err != nil {
			break
		}
	}
	if err == nil && u.fresh {
		if _, err = u.s.run(ctx, resetSc, []string{u.s.pointerKey(u.id)}, nil); err != nil {
			err = fmt.Errorf("redisstore: reserve: deleting the pointer: %w", err)
		}
	}
	switch {
	case err != nil && cause != nil:
		return fmt.Errorf("%w (and undoing the slots already reserved failed: %v)", cause, err)
	case err != nil:
		return fmt.Errorf("redisstore: reserve: undoing the slots already reserved: %w", err)
	}
	return cause
}

// settleCluster settles on Redis Cluster: the pointer names the slots of
// the records (or becomes a tombstone), then each slot's record is settled
// in one call. A failure part way leaves the settled slots settled; a
// retry settles the rest and finds those already settled.
func (s *Store) settleCluster(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, []tokenlimit.Noted, error) {
	reply, err := s.pointer(ctx, now, req.ID, "settle", "", req.TTL, nil)
	if err != nil {
		return 0, nil, err
	}
	if reply[0] != int64(tokenlimit.Settled) {
		return tokenlimit.UnknownReservation, nil, nil
	}
	status := tokenlimit.UnknownReservation
	var noted []tokenlimit.Noted
	for _, slot := range reply[1:] {
		st, slotNoted, err := s.settleAt(ctx, settleJob{queuedCall: queuedCall{ctx: ctx, now: now}, req: req, slot: uint16(slot)})
		if err != nil {
			return 0, nil, err
		}
		status = min(status, st) // Settled before AlreadySettled before UnknownReservation
		noted = append(noted, slotNoted...)
	}
	if req.Undo { // the records are gone: so goes the pointer, and the id is free again
		if _, err := s.run(ctx, resetSc, []string{s.pointerKey(req.ID)}, nil); err != nil {
			return 0, nil, fmt.Errorf("redisstore: settle: deleting the pointer of an undone reservation: %w", err)
		}
	}
	return status, noted, nil
}

// pointer runs claim.lua on id's pointer.
func (s *Store) pointer(ctx context.Context, now time.Time, id, op, digest string, ttl time.Duration, slots []int64) ([]int64, error) {
	args := append(s.header(now, 3+len(slots)), op, digest, strconv.FormatInt(ttl.Microseconds(), 10))
	for _, slot := range slots {
		args = append(args, strconv.FormatInt(slot, 10))
	}
	reply, err := s.runIdempotent(ctx, claimSc, []string{s.pointerKey(id)}, args)
	if err != nil {
		return nil, fmt.Errorf("redisstore: reservation pointer: %w", err)
	}
	if len(reply) == 0 {
		return nil, fmt.Errorf("redisstore: reservation pointer: empty reply")
	}
	return reply, nil
}
