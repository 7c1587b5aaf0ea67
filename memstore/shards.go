package memstore

import (
	"hash/maphash"
	"slices"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/algo"
)

func (s *Store) shardOf(key string) int {
	return int(maphash.String(s.seed, key) & uint64(len(s.shards)-1))
}

// lockSet is the set of shards one call holds, in index order.
type lockSet struct {
	idx [tokenlimit.MaxItems]int
	n   int
}

// lock locks the shards that hold items (at most MaxItems), in index order
// so that concurrent multi-item checks cannot deadlock, and sweeps those that
// are due at now. Release them with unlock.
func (s *Store) lock(set *lockSet, items []tokenlimit.Item, now int64) {
	for i := range items {
		set.idx[i] = s.shardOf(items[i].Key)
	}
	idx := set.idx[:len(items)]
	slices.Sort(idx)
	set.n = len(slices.Compact(idx))
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
	for k, e := range sh.entries {
		if e.expires <= now {
			delete(sh.entries, k)
			s.keys.Add(-1)
		}
	}
}

// lookup returns key's entry, or nil if it has none. An entry past its
// expiry is still returned until a sweep drops it: its state is empty by
// then anyway, unless the clock stepped back, and then remembering it is the
// safe choice. The Redis store behaves the same way (a key lives until
// Redis expires it). The caller holds the key's shard lock.
func (s *Store) lookup(alg tokenlimit.Algorithm, key string) *entry {
	return s.shards[s.shardOf(key)].entries[mapKey{alg, key}]
}

// create makes key's entry. The caller holds the key's shard lock and has
// counted the new key with reserveKeys.
func (s *Store) create(alg tokenlimit.Algorithm, key string) *entry {
	sh := &s.shards[s.shardOf(key)]
	k := mapKey{alg, key}
	e := &entry{}
	if alg == tokenlimit.SlidingLog {
		e.log = &algo.Log{}
	}
	sh.entries[k] = e
	return e
}

// remove deletes key's entry. The caller holds the key's shard lock.
func (s *Store) remove(alg tokenlimit.Algorithm, key string) {
	sh := &s.shards[s.shardOf(key)]
	if _, ok := sh.entries[mapKey{alg, key}]; ok {
		delete(sh.entries, mapKey{alg, key})
		s.keys.Add(-1)
	}
}
