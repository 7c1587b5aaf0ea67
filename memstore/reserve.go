package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// recordState is where a reservation record stands.
type recordState uint8

const (
	recordReserved  recordState = iota + 1 // charged, awaiting its settlement
	recordSettled                          // settled or cancelled; kept so a retry answers "already"
	recordTombstone                        // settled before any reserve: a late reserve charges nothing
)

// record is a reservation kept under its id in the shard of the id, until
// expires (µs). It counts as one key against MaxKeys.
type record struct {
	expires int64
	state   recordState
	digest  string
	at      int64 // µs, when the charge was decided
	items   []tokenlimit.Item
	rules   []tokenlimit.SettleRule
	results []tokenlimit.Result
	notes   []string // one per item, or none (ReserveRequest.Notes)
}

var _ tokenlimit.Reserver = (*Store)(nil)

// Reserve implements tokenlimit.Reserver: the check, its charge and the
// record happen under the locks of the items' shards and the id's shard, so
// no other call sees one without the other. When the store is full it
// sweeps and tries once more, like Check.
func (s *Store) Reserve(_ context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	out, err := s.reserve(now, req, results)
	if errors.Is(err, tokenlimit.ErrStoreFull) && s.sweepAll(now) {
		out, err = s.reserve(now, req, results)
	}
	return out, err
}

func (s *Store) reserve(now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	if err := storekit.ValidateReserve(req, results); err != nil {
		return tokenlimit.ReserveOutcome{}, fmt.Errorf("memstore: %w", err)
	}
	t, err := micros(now)
	if err != nil {
		return tokenlimit.ReserveOutcome{}, err
	}
	digest := storekit.Digest(req)
	decided := make([]pending, len(req.Items))
	if err := s.prepare(req.Items, results, decided); err != nil {
		return tokenlimit.ReserveOutcome{}, err
	}
	idHash := s.keyHash(req.ID)
	var locks lockSet
	s.lockWith(&locks, decided, &idHash, t)
	defer s.unlock(&locks)
	if rec := s.record(req.ID, t); rec != nil {
		return replay(rec, digest, req.Items, results), nil
	}
	allowed, err := s.checkLocked(req.Items, decided, results, t, 1)
	if err != nil {
		return tokenlimit.ReserveOutcome{}, err
	}
	if !allowed {
		return tokenlimit.ReserveOutcome{Status: tokenlimit.Denied, At: now}, nil
	}
	rec := &record{
		expires: t + req.TTL.Microseconds(), state: recordReserved, digest: digest, at: t,
		items: req.Items, rules: append([]tokenlimit.SettleRule(nil), req.Rules...),
		results: append([]tokenlimit.Result(nil), results...), notes: noted(req.Notes),
	}
	s.shardOf(idHash).records[req.ID] = rec // counted by checkLocked
	return tokenlimit.ReserveOutcome{Status: tokenlimit.Reserved, At: now}, nil
}

// replay answers a reserve of an id that already has a record.
func replay(rec *record, digest string, items []tokenlimit.Item, results []tokenlimit.Result) tokenlimit.ReserveOutcome {
	switch {
	case rec.state == recordTombstone:
		storekit.NoCharge(items, results)
		return tokenlimit.ReserveOutcome{Status: tokenlimit.Closed, At: time.UnixMicro(rec.at)}
	case rec.digest != digest:
		storekit.NoCharge(items, results)
		return tokenlimit.ReserveOutcome{Status: tokenlimit.Conflict, At: time.UnixMicro(rec.at)}
	}
	copy(results, rec.results)
	return tokenlimit.ReserveOutcome{Status: tokenlimit.Replayed, At: time.UnixMicro(rec.at)}
}

// Settle implements tokenlimit.Reserver. A settle that finds no record
// writes a tombstone, which needs room under MaxKeys: when there is none it
// fails with tokenlimit.ErrStoreFull and changes nothing.
func (s *Store) Settle(_ context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	st, rec, err := s.settle(now, req)
	if errors.Is(err, tokenlimit.ErrStoreFull) && s.sweepAll(now) {
		st, rec, err = s.settle(now, req)
	}
	if req.Noted != nil && err == nil {
		*req.Noted = (*req.Noted)[:0]
		if st == tokenlimit.Settled {
			*req.Noted = appendNoted(*req.Noted, rec)
		}
	}
	return st, err
}

// settle settles req, returning the record it settled (nil unless Settled).
func (s *Store) settle(now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, *record, error) {
	if err := req.Validate(); err != nil {
		return 0, nil, fmt.Errorf("memstore: %w", err)
	}
	t, err := micros(now)
	if err != nil {
		return 0, nil, err
	}
	// The items' shards must be locked with the id's, in index order: learn
	// the items first, then lock them all and look again. A record's items
	// never change, so a second round only happens when a reserve of the id
	// landed in between.
	for {
		items := s.recordItems(req.ID, t)
		if st, rec, again, err := s.settleLocked(req, items, t); !again {
			return st, rec, err
		}
	}
}

// noted returns notes unless none is set.
func noted(notes []string) []string {
	for _, n := range notes {
		if n != "" {
			return slices.Clone(notes)
		}
	}
	return nil
}

// appendNoted appends to out the items of rec reserved with a note. A
// record's notes and results never change once written.
func appendNoted(out []tokenlimit.Noted, rec *record) []tokenlimit.Noted {
	for i, n := range rec.notes {
		if n != "" {
			out = append(out, tokenlimit.Noted{Note: n, Result: rec.results[i]})
		}
	}
	return out
}

// settleLocked settles req with the shards of items and the id locked,
// returning the record when Settled; it reports again when the record
// turns out to have other items.
func (s *Store) settleLocked(req tokenlimit.SettleRequest, items []tokenlimit.Item, t int64) (_ tokenlimit.SettleStatus, _ *record, again bool, _ error) {
	keys := make([]pending, len(items))
	for i := range items {
		keys[i].h = s.keyHash(items[i].Key)
	}
	idHash := s.keyHash(req.ID)
	var locks lockSet
	s.lockWith(&locks, keys, &idHash, t)
	defer s.unlock(&locks)
	rec := s.record(req.ID, t)
	switch {
	case rec == nil:
		if err := s.reserveKeys(1); err != nil {
			return 0, nil, false, fmt.Errorf("memstore: settle: no room for the tombstone of %q: %w", req.ID, err)
		}
		s.shardOf(idHash).records[req.ID] = &record{expires: t + req.TTL.Microseconds(), state: recordTombstone, at: t}
		return tokenlimit.UnknownReservation, nil, false, nil
	case rec.state == recordTombstone:
		return tokenlimit.UnknownReservation, nil, false, nil
	case rec.state == recordSettled:
		return tokenlimit.AlreadySettled, nil, false, nil
	case len(rec.items) != len(items):
		return 0, nil, true, nil
	}
	adj := settlement(rec, req)
	adjKeys := make([]pending, len(adj))
	for i := range adj {
		adjKeys[i].h = s.keyHash(adj[i].Key)
	}
	if err := s.adjustLocked(adj, adjKeys, t); err != nil {
		return 0, nil, false, err
	}
	if req.Undo {
		s.dropRecord(idHash, req.ID)
		return tokenlimit.Settled, rec, false, nil
	}
	rec.state = recordSettled
	return tokenlimit.Settled, rec, false, nil
}

// recordItems returns the items of id's reservation, if it holds one.
func (s *Store) recordItems(id string, now int64) []tokenlimit.Item {
	sh := s.shardOf(s.keyHash(id))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if rec := s.record(id, now); rec != nil && rec.state == recordReserved {
		return rec.items
	}
	return nil
}

// settlement returns the adjustments that settle rec as req says.
func settlement(rec *record, req tokenlimit.SettleRequest) []tokenlimit.Adjustment {
	var adj []tokenlimit.Adjustment
	for i, it := range rec.items {
		rule := tokenlimit.SettleActual
		if len(rec.rules) > 0 {
			rule = rec.rules[i]
		}
		delta := storekit.SettleDelta(it.Limit, it.Cost, storekit.Settled(req, rule, it.Cost))
		if delta != 0 {
			adj = append(adj, tokenlimit.Adjustment{Key: it.Key, Limit: it.Limit, Delta: delta, ChargedAt: time.UnixMicro(rec.at)})
		}
	}
	return adj
}

// record returns id's record unless it has none or it expired (then it is
// dropped). The caller holds the id's shard lock.
func (s *Store) record(id string, now int64) *record {
	sh := s.shardOf(s.keyHash(id))
	rec := sh.records[id]
	if rec != nil && rec.expires <= now {
		delete(sh.records, id)
		s.keys.Add(-1)
		return nil
	}
	return rec
}

// dropRecord deletes id's record (an undone reservation). The caller holds
// the id's shard lock.
func (s *Store) dropRecord(idHash uint64, id string) {
	delete(s.shardOf(idHash).records, id)
	s.keys.Add(-1)
}

// Holds reports whether id has a reservation recorded at now that is not
// settled yet. It changes nothing (a Settle of an unknown id would write a
// tombstone).
func (s *Store) Holds(id string, now time.Time) bool {
	sh := s.shardOf(s.keyHash(id))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rec := sh.records[id]
	return rec != nil && rec.state == recordReserved && rec.expires > now.UnixMicro()
}
