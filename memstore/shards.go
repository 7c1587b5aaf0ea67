package memstore

import (
	"hash/maphash"
	"slices"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/algo"
	"github.com/tokenlimit/tokenlimit/internal/budgetslot"
)

// keyHash is a key's hash under the store's seed: it picks the shard (its
// low bits) and, mixed with the algorithm (slot), the map slot. A key is
// hashed once per call.
func (s *Store) keyHash(key string) uint64 {
	return maphash.String(s.seed, key)
}

func (s *Store) shardOf(h uint64) *shard {
	return &s.shards[h&uint64(len(s.shards)-1)]
}

// slot is the map key of (alg, key) in its shard. Distinct pairs that
// share a slot are chained (entry.next).
func slot(h uint64, alg tokenlimit.Algorithm) uint64 { return budgetslot.Of(h, alg) }

// lockSet is the set of shards one call holds, in index order.
type lockSet struct {
	idx [tokenlimit.MaxItems + 1]uint32
	n   int
}

// lock locks the shards that hold the pending decisions' keys (at most MaxItems), in
// index order so that concurrent multi-item checks cannot deadlock, and
// sweeps those that are due at now. Release them with unlock.
func (s *Store) lock(set *lockSet, decided []pending, now int64) {
	s.lockWith(set, decided, nil, now)
}

// lockWith is lock that also locks the shard of the key hashed to *extra,
// if not nil (a reservation's id).
func (s *Store) lockWith(set *lockSet, decided []pending, extra *uint64, now int64) {
	mask := uint64(len(s.shards) - 1)
	n := len(decided)
	for i := range decided {
		set.idx[i] = uint32(decided[i].h & mask)
	}
	if extra != nil {
		set.idx[n] = uint32(*extra & mask)
		n++
	}
	set.n = n
	if n > 1 {
		idx := set.idx[:n]
		slices.Sort(idx)
		set.n = len(slices.Compact(idx))
	}
	for _, i := range set.idx[:set.n] {
		s.shards[i].mu.Lock()
		s.sweepDue(&s.shards[i], now)
	}
}

func (s *Store) unlock(set *lockSet) {
	for _, i := range set.idx[:set.n] {
		s.shards[i].mu.Unlock()
	}
}

// sweepDue drops the shard's expired entries if SweepInterval has passed
// since its last sweep. The caller holds the shard's lock.
func (s *Store) sweepDue(sh *shard, now int64) {
	if now-sh.lastSweep >= s.sweep {
		s.sweepShard(sh, now)
	}
}

// sweepAll sweeps every shard, one lock at a time, at most once per
// SweepInterval, and reports whether it freed any key. The caller holds no
// shard lock.
func (s *Store) sweepAll(now time.Time) bool {
	t := now.UnixMicro()
	last := s.lastFullSweep.Load()
	if t-last < s.sweep || !s.lastFullSweep.CompareAndSwap(last, t) {
		return false
	}
	before := s.keys.Load()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.sweepShard(sh, t)
		sh.mu.Unlock()
	}
	return s.keys.Load() < before
}

// sweepShard drops the shard's expired entries. The caller holds its lock.
func (s *Store) sweepShard(sh *shard, now int64) {
	sh.lastSweep = now
	for k, head := range sh.entries {
		kept := head
		for e := head; e != nil; e = e.next {
			if e.expires <= now {
				kept = unlink(kept, e)
				s.keys.Add(-1)
			}
		}
		switch {
		case kept == nil:
			delete(sh.entries, k)
		case kept != head:
			sh.entries[k] = kept
		}
	}
	for id, r := range sh.records {
		if r.expires <= now {
			delete(sh.records, id)
			s.keys.Add(-1)
		}
	}
}

// unlink returns the chain head without e.
func unlink(head, e *entry) *entry {
	if head == e {
		return e.next
	}
	for p := head; p.next != nil; p = p.next {
		if p.next == e {
			p.next = e.next
			break
		}
	}
	return head
}

// lookup returns the entry of (alg, key), whose hash is h, or nil if it has
// none. An entry past its expiry is still returned until a sweep drops it:
// its state is empty by then anyway, unless the clock stepped back, and then
// remembering it is the safe choice. The Redis store behaves the same way (a
// key lives until Redis expires it). The caller holds the key's shard lock.
func (s *Store) lookup(h uint64, alg tokenlimit.Algorithm, key string) *entry {
	return s.shardOf(h).lookup(h, alg, key)
}

// lookup is Store.lookup in sh, the key's shard.
func (sh *shard) lookup(h uint64, alg tokenlimit.Algorithm, key string) *entry {
	for e := sh.entries[slot(h, alg)]; e != nil; e = e.next {
		if e.alg == alg && e.key == key {
			return e
		}
	}
	return nil
}

// create makes the entry of (alg, key), whose hash is h. The caller holds
// the key's shard lock, has checked that it has no entry and has counted
// the new key with reserveKeys.
func (s *Store) create(h uint64, alg tokenlimit.Algorithm, key string) *entry {
	sh, k := s.shardOf(h), slot(h, alg)
	e := &entry{key: key, alg: alg, next: sh.entries[k]}
	if alg == tokenlimit.SlidingLog {
		e.log = &algo.Log{}
	}
	sh.entries[k] = e
	return e
}

// remove deletes the entry of (alg, key), whose hash is h, if it has one.
// The caller holds the key's shard lock.
func (s *Store) remove(h uint64, alg tokenlimit.Algorithm, key string) {
	e := s.lookup(h, alg, key)
	if e == nil {
		return
	}
	sh, k := s.shardOf(h), slot(h, alg)
	if head := unlink(sh.entries[k], e); head != nil {
		sh.entries[k] = head
	} else {
		delete(sh.entries, k)
	}
	s.keys.Add(-1)
}
