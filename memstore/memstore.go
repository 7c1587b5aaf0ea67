// Package memstore is the embedded, in-process tokenlimit.Store: the default
// when no Redis is configured, with the same semantics as the Redis store
// (both pass storetest). Keys live in a sharded map, one mutex per shard;
// idle keys expire and are swept as time passes; a bound on live keys makes
// new keys fail with tokenlimit.ErrStoreFull rather than evict live ones.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/algo"
)

// Defaults for Options' zero values.
const (
	DefaultShards        = 64
	DefaultMaxKeys       = 1_000_000
	DefaultSweepInterval = 10 * time.Second
)

// Options configures a Store. The zero value is valid and uses the defaults.
type Options struct {
	// Shards is the number of independently locked parts of the key space,
	// rounded up to a power of two. Zero means DefaultShards.
	Shards int
	// MaxKeys bounds the live keys; creating one more fails with
	// tokenlimit.ErrStoreFull. Zero means DefaultMaxKeys.
	MaxKeys int
	// SweepInterval is how often, in the store's time (the now passed to
	// Check and Adjust), each shard drops its expired keys. Zero means
	// DefaultSweepInterval.
	SweepInterval time.Duration
}

// Store is the in-memory store. It is safe for concurrent use.
type Store struct {
	shards  []shard
	seed    maphash.Seed
	maxKeys int64
	sweep   int64 // µs
	keys    atomic.Int64
	// lastFullSweep is when a full store last swept every shard (µs), so
	// that a store kept full cannot make every request walk every key.
	lastFullSweep atomic.Int64
}

var _ tokenlimit.Store = (*Store)(nil)

type shard struct {
	mu        sync.Mutex
	entries   map[mapKey]*entry
	lastSweep int64
	// Pad to two cache lines so that cores working on different shards do
	// not invalidate each other's lines (false sharing).
	_ [128 - 24]byte
}

// mapKey keeps algorithms apart: the same key under two algorithms is two
// budgets, as in Redis.
type mapKey struct {
	alg tokenlimit.Algorithm
	key string
}

// entry is one key's state: s holds a fixed window's Counter, a sliding
// counter's Pair or a bucket's TAT; log is a sliding log's.
type entry struct {
	expires int64 // µs; the entry is empty (and absent) from then on
	s       [3]int64
	log     *algo.Log
}

// New returns an empty store.
func New(opts Options) (*Store, error) {
	if opts.Shards < 0 || opts.MaxKeys < 0 || opts.SweepInterval < 0 {
		return nil, fmt.Errorf("memstore: negative option in %+v", opts)
	}
	n := 1
	for n < orDefault(opts.Shards, DefaultShards) {
		n *= 2
	}
	s := &Store{
		shards:  make([]shard, n),
		seed:    maphash.MakeSeed(),
		maxKeys: int64(orDefault(opts.MaxKeys, DefaultMaxKeys)),
		sweep:   orDefault(opts.SweepInterval, DefaultSweepInterval).Microseconds(),
	}
	for i := range s.shards {
		s.shards[i].entries = make(map[mapKey]*entry)
	}
	return s, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Len returns the number of live keys, expired ones not yet swept included.
func (s *Store) Len() int { return int(s.keys.Load()) }

// pending is one item's decision before it is committed.
type pending struct {
	e     *entry
	state [3]int64
	out   algo.Outcome
}

// Check implements tokenlimit.Store. When the store is full it sweeps every
// shard of expired keys and tries once more before refusing.
func (s *Store) Check(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	at, err := s.check(now, items, results)
	if errors.Is(err, tokenlimit.ErrStoreFull) && s.sweepAll(now) {
		at, err = s.check(now, items, results)
	}
	return at, err
}

func (s *Store) check(now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	if err := tokenlimit.ValidateItems(items, results); err != nil {
		return now, fmt.Errorf("memstore: %w", err)
	}
	t, err := micros(now)
	if err != nil {
		return now, err
	}
	var buf [4]pending
	decided := buf[:0]
	if len(items) > len(buf) {
		decided = make([]pending, 0, len(items))
	}
	var locks lockSet
	s.lock(&locks, items, t)
	defer s.unlock(&locks)
	allowed := true
	for i := range items {
		p := s.decide(&items[i], t)
		allowed = allowed && p.out.Allowed
		decided = append(decided, p)
	}
	if allowed {
		if err := s.commit(items, decided, t); err != nil {
			return now, err
		}
	} else {
		s.reportUncharged(items, decided, t)
	}
	for i, p := range decided {
		results[i] = result(items[i].Limit, p.out)
	}
	return now, nil
}

func micros(now time.Time) (int64, error) {
	t := now.UnixMicro()
	if t < 0 {
		return 0, fmt.Errorf("memstore: time %s is before the Unix epoch: %w", now, tokenlimit.ErrInvalid)
	}
	return t, nil
}

// decide runs the item's algorithm on its current state without storing.
func (s *Store) decide(it *tokenlimit.Item, now int64) pending {
	e := s.lookup(it.Limit.Algorithm, it.Key)
	p := pending{e: e}
	var st [3]int64
	if e != nil {
		st = e.s
	}
	switch lim := it.Limit; lim.Algorithm {
	case tokenlimit.FixedWindow:
		c, out := window(lim).Fixed(algo.Counter{Start: st[0], Count: st[1]}, now, it.Cost)
		p.state, p.out = [3]int64{c.Start, c.Count}, out
	case tokenlimit.SlidingCounter:
		c, out := window(lim).Sliding(algo.Pair{Start: st[0], Cur: st[1], Prev: st[2]}, now, it.Cost)
		p.state, p.out = [3]int64{c.Start, c.Cur, c.Prev}, out
	case tokenlimit.SlidingLog:
		var log algo.Log
		if e != nil {
			window(lim).Trim(e.log, now)
			log = *e.log
		}
		p.out = window(lim).Decide(&log, now, it.Cost)
	default:
		tat, out := bucket(lim).Check(algo.TAT{Tat: st[0], Frac: st[1]}, now, it.Cost)
		p.state, p.out = [3]int64{tat.Tat, tat.Frac}, out
	}
	return p
}

// reportUncharged replaces the outcomes of the items that would have fit,
// in a check that was denied as a whole, by their uncharged state.
func (s *Store) reportUncharged(items []tokenlimit.Item, decided []pending, now int64) {
	for i := range decided {
		if decided[i].out.Allowed && items[i].Cost > 0 {
			peek := items[i]
			peek.Cost = 0
			decided[i].out = s.decide(&peek, now).out
		}
	}
}

// commit stores every charged item's new state. Keys are created only if
// all of them fit under MaxKeys, so a full store changes nothing.
func (s *Store) commit(items []tokenlimit.Item, decided []pending, now int64) error {
	created := 0
	for i := range decided {
		if decided[i].e == nil && items[i].Cost > 0 {
			created++
		}
	}
	if err := s.reserveKeys(created); err != nil {
		return err
	}
	for i := range decided {
		it, p := &items[i], &decided[i]
		if it.Cost == 0 {
			continue
		}
		e := p.e
		if e == nil {
			e = s.create(it.Limit.Algorithm, it.Key)
		}
		if it.Limit.Algorithm == tokenlimit.SlidingLog {
			e.log.Add(now, it.Cost)
		} else {
			e.s = p.state
		}
		e.expires = now + p.out.ResetAfter
	}
	return nil
}

func (s *Store) reserveKeys(n int) error {
	if n == 0 {
		return nil
	}
	if live := s.keys.Add(int64(n)); live > s.maxKeys {
		s.keys.Add(-int64(n))
		return fmt.Errorf("memstore: %d live keys, the MaxKeys bound, leave no room for %d more: %w", live-int64(n), n, tokenlimit.ErrStoreFull)
	}
	return nil
}

func result(l tokenlimit.Limit, out algo.Outcome) tokenlimit.Result {
	return tokenlimit.Result{
		Allowed:          out.Allowed,
		Limit:            l.Capacity(),
		Remaining:        out.Remaining,
		RetryAfter:       time.Duration(out.RetryAfter) * time.Microsecond,
		ResetAfter:       time.Duration(out.ResetAfter) * time.Microsecond,
		CostExceedsLimit: out.TooLarge,
	}
}

// Adjust implements tokenlimit.Store, sweeping like Check when full.
func (s *Store) Adjust(_ context.Context, now time.Time, adjustments []tokenlimit.Adjustment) error {
	err := s.adjustAll(now, adjustments)
	if errors.Is(err, tokenlimit.ErrStoreFull) && s.sweepAll(now) {
		err = s.adjustAll(now, adjustments)
	}
	return err
}

func (s *Store) adjustAll(now time.Time, adjustments []tokenlimit.Adjustment) error {
	if err := tokenlimit.ValidateAdjustments(adjustments); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	t, err := micros(now)
	if err != nil {
		return err
	}
	items := make([]tokenlimit.Item, len(adjustments))
	for i, a := range adjustments {
		items[i] = tokenlimit.Item{Key: a.Key, Limit: a.Limit}
	}
	var locks lockSet
	s.lock(&locks, items, t)
	defer s.unlock(&locks)
	created := 0
	for _, a := range adjustments {
		if a.Delta > 0 && s.lookup(a.Limit.Algorithm, a.Key) == nil {
			created++
		}
	}
	if err := s.reserveKeys(created); err != nil {
		return err
	}
	for _, a := range adjustments {
		s.adjust(a, t)
	}
	return nil
}

// adjust applies one adjustment, creating the entry (already counted) if
// needed and deleting it if it ends up empty.
func (s *Store) adjust(a tokenlimit.Adjustment, now int64) {
	e := s.lookup(a.Limit.Algorithm, a.Key)
	if e == nil && a.Delta < 0 {
		return // nothing is held to refund: the budget is whole
	}
	if e == nil {
		e = s.create(a.Limit.Algorithm, a.Key)
	}
	at := a.ChargedAt.UnixMicro()
	var keep int64
	switch a.Limit.Algorithm {
	case tokenlimit.FixedWindow:
		var c algo.Counter
		c, keep = window(a.Limit).FixedAdjust(algo.Counter{Start: e.s[0], Count: e.s[1]}, now, at, a.Delta)
		e.s = [3]int64{c.Start, c.Count}
	case tokenlimit.SlidingCounter:
		var p algo.Pair
		p, keep = window(a.Limit).SlidingAdjust(algo.Pair{Start: e.s[0], Cur: e.s[1], Prev: e.s[2]}, now, at, a.Delta)
		e.s = [3]int64{p.Start, p.Cur, p.Prev}
	case tokenlimit.SlidingLog:
		keep = window(a.Limit).LogAdjust(e.log, now, at, a.Delta)
	default:
		var tat algo.TAT
		tat, keep = bucket(a.Limit).Adjust(algo.TAT{Tat: e.s[0], Frac: e.s[1]}, now, a.Delta)
		e.s = [3]int64{tat.Tat, tat.Frac}
	}
	e.expires = now + keep
	if keep == 0 {
		s.remove(a.Limit.Algorithm, a.Key)
	}
}

// Reset implements tokenlimit.Store.
func (s *Store) Reset(_ context.Context, key string, alg tokenlimit.Algorithm) error {
	if err := tokenlimit.ValidateKey(key, alg); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	sh := &s.shards[s.shardOf(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s.remove(alg, key)
	return nil
}

var _ tokenlimit.LogReader = (*Store)(nil)

// LogEntries implements tokenlimit.LogReader.
func (s *Store) LogEntries(_ context.Context, key string, limit tokenlimit.Limit, now time.Time) ([]tokenlimit.LogEntry, error) {
	if err := (tokenlimit.Item{Key: key, Limit: limit}).Validate(); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	if limit.Algorithm != tokenlimit.SlidingLog {
		return nil, fmt.Errorf("memstore: %s has no log: %w", limit.Algorithm, tokenlimit.ErrInvalid)
	}
	t, err := micros(now)
	if err != nil {
		return nil, err
	}
	sh := &s.shards[s.shardOf(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.lookup(limit.Algorithm, key)
	if e == nil {
		return nil, nil
	}
	var out []tokenlimit.LogEntry
	for _, le := range e.log.Entries {
		if le.At > t-limit.Period.Microseconds() {
			out = append(out, tokenlimit.LogEntry{At: time.UnixMicro(le.At), Cost: le.Cost})
		}
	}
	return out, nil
}

func window(l tokenlimit.Limit) algo.Window {
	return algo.Window{Limit: l.Quota, Length: l.Period.Microseconds(), Offset: l.Offset.Microseconds()}
}

func bucket(l tokenlimit.Limit) algo.Bucket {
	num, den := l.Interval()
	return algo.Bucket{Capacity: l.Capacity(), Num: num, Den: den}
}
