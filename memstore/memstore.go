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
	"github.com/tokenlimit/tokenlimit/storekit"
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
	// limits remembers limits that passed validation, with what the
	// algorithms derive from them, so a decision on a known limit neither
	// validates it again nor recomputes its interval.
	limits [limitSlots]atomic.Pointer[limitInfo]
}

var (
	_ tokenlimit.Store     = (*Store)(nil)
	_ tokenlimit.Describer = (*Store)(nil)
)

// Describe implements tokenlimit.Describer: "memory", in-process.
func (s *Store) Describe() tokenlimit.StoreInfo { return tokenlimit.StoreInfo{Name: "memory"} }

type shard struct {
	mu sync.Mutex
	// entries maps slot(hash, algorithm) to the entries of that slot.
	entries   map[uint64]*entry
	records   map[string]*record // reservations by id
	lastSweep int64
	// Pad to two cache lines so that cores working on different shards do
	// not invalidate each other's lines (false sharing).
	_ [128 - 32]byte
}

// entry is one key's state under one algorithm: s holds a fixed window's
// Counter, a sliding counter's Pair or a bucket's TAT; log is a sliding
// log's. next chains the entries whose (key, algorithm) share a map slot.
type entry struct {
	expires int64 // µs; the entry is empty (and absent) from then on
	s       [3]int64
	log     *algo.Log
	key     string
	alg     tokenlimit.Algorithm
	next    *entry
}

// limitInfo is a valid limit and its algorithm's parameters.
type limitInfo struct {
	lim      tokenlimit.Limit
	capacity int64 // lim.Capacity()
	bucketed bool  // a TokenBucket or GCRA: b is set
	w        algo.Window
	b        algo.Bucket
}

// limitSlots is the size of Store.limits, a power of two.
const limitSlots = 64

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
		s.shards[i].entries = make(map[uint64]*entry)
		s.shards[i].records = make(map[string]*record)
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

// MaxKeys returns the bound on live keys (Options.MaxKeys, or its default).
func (s *Store) MaxKeys() int { return int(s.maxKeys) }

// pending is one item's decision before it is committed.
type pending struct {
	h     uint64 // the key's hash
	li    *limitInfo
	e     *entry
	state [3]int64
	out   algo.Outcome
}

// Check implements tokenlimit.Store. When the store is full it sweeps every
// shard of expired keys and tries once more before refusing.
//
// One item with one result takes one shard, and a denial is already the
// uncharged state; a known bucket is decided and charged in place.
func (s *Store) Check(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	if len(items) != 1 || len(results) != 1 {
		return s.checkRetry(now, items, results)
	}
	it := &items[0]
	li := s.known(&it.Limit)
	if li == nil || !quickValid(it) { // checkItems validates it and learns the limit
		return s.checkRetry(now, items, results)
	}
	t, err := micros(now)
	if err != nil {
		return now, err
	}
	h := s.keyHash(it.Key)
	sh := s.shardOf(h)
	// Up to the Unlock below, the bucket path sweeps, reads maps and does
	// integer arithmetic on a valid limit, none of which can panic: it
	// needs no defer.
	sh.mu.Lock()
	s.sweepDue(sh, t)
	e := sh.lookup(h, it.Limit.Algorithm, it.Key)
	if e == nil || !li.bucketed {
		err := s.checkOneUnlock(sh, items, results, pending{h: h, li: li, e: e}, t)
		if s.retryFull(err, now) {
			err = s.checkItems(now, items, results)
		}
		return now, err
	}
	tat, out := li.b.Check(algo.TAT{Tat: e.s[0], Frac: e.s[1]}, t, it.Cost)
	if out.Allowed && it.Cost > 0 {
		e.s[0], e.s[1], e.expires = tat.Tat, tat.Frac, t+out.ResetAfter
	}
	sh.mu.Unlock()
	li.result(&results[0], &out)
	return now, nil
}

// checkRetry is Check through checkItems, tried once more if the store is
// full and a sweep freed keys.
func (s *Store) checkRetry(now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	err := s.checkItems(now, items, results)
	if s.retryFull(err, now) {
		err = s.checkItems(now, items, results)
	}
	return now, err
}

// retryFull reports whether err is tokenlimit.ErrStoreFull and sweeping
// every shard freed keys: then the call that failed may try once more.
func (s *Store) retryFull(err error, now time.Time) bool {
	return err != nil && errors.Is(err, tokenlimit.ErrStoreFull) && s.sweepAll(now)
}

// checkItems is one attempt of Check for any number of items.
func (s *Store) checkItems(now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) error {
	var buf [4]pending
	decided := buf[:]
	if len(items) > len(buf) && len(items) <= tokenlimit.MaxItems {
		decided = make([]pending, len(items))
	}
	if err := s.prepare(items, results, decided); err != nil {
		return err
	}
	t, err := micros(now)
	if err != nil {
		return err
	}
	decided = decided[:len(items)]
	var locks lockSet
	s.lock(&locks, decided, t)
	defer s.unlock(&locks)
	_, err = s.checkLocked(items, decided, results, t, 0)
	return err
}

// checkLocked decides items, prepared in decided, at now and, if all allow,
// charges them, creating keys only if they and extra more fit under
// MaxKeys. It reports whether all allowed. The caller holds the items'
// shard locks.
func (s *Store) checkLocked(items []tokenlimit.Item, decided []pending, results []tokenlimit.Result, t int64, extra int) (bool, error) {
	allowed := true
	for i := range decided {
		p := &decided[i]
		p.e = s.lookup(p.h, items[i].Limit.Algorithm, items[i].Key)
		s.decide(p, &items[i], items[i].Cost, t)
		allowed = allowed && p.out.Allowed
	}
	if allowed {
		if err := s.commit(items, decided, t, extra); err != nil {
			return false, err
		}
	} else {
		s.reportUncharged(items, decided, t)
	}
	for i := range decided {
		decided[i].li.result(&results[i], &decided[i].out)
	}
	return allowed, nil
}

// quickValid reports whether it has a key and a cost in range: with a known
// limit, a valid item. Its bounds are storekit.ValidateItem's
// (TestQuickValidAgreesWithValidate holds them together); an item it
// refuses takes the full path, which says what is wrong.
func quickValid(it *tokenlimit.Item) bool {
	return it.Key != "" && len(it.Key) <= tokenlimit.MaxKeyLength && it.Cost >= 0 && it.Cost <= tokenlimit.MaxCost
}

// checkOneUnlock is Check's attempt for one item that is not a known bucket
// (a new key, or a window algorithm), prepared (with its entry) in one. The
// caller has locked sh, the key's shard; checkOneUnlock unlocks it.
func (s *Store) checkOneUnlock(sh *shard, items []tokenlimit.Item, results []tokenlimit.Result, one pending, t int64) error {
	defer sh.mu.Unlock()
	it, decided := &items[0], [1]pending{one}
	p := &decided[0]
	s.decide(p, it, it.Cost, t)
	switch {
	case !p.out.Allowed || it.Cost == 0:
	case p.e != nil && it.Limit.Algorithm != tokenlimit.SlidingLog: // commit's work for a known key
		p.e.s, p.e.expires = p.state, t+p.out.ResetAfter
	default:
		if err := s.commit(items, decided[:], t, 0); err != nil {
			return err
		}
	}
	p.li.result(&results[0], &p.out)
	return nil
}

// prepare validates items and results, as storekit.ValidateItems does and
// with its errors, and fills one pending decision per item into decided
// (which has room for them) with the key's hash and the limit's parameters:
// each key is hashed once and each known limit is not validated again.
func (s *Store) prepare(items []tokenlimit.Item, results []tokenlimit.Result, decided []pending) error {
	ok := len(items) > 0 && len(items) <= len(decided) && len(results) == len(items)
	for i := 0; ok && i < len(items); i++ {
		it, p := &items[i], &decided[i]
		p.li = s.known(&it.Limit)
		ok = p.li != nil && quickValid(it)
		p.h = s.keyHash(it.Key)
		for j := 0; ok && j < i; j++ {
			ok = decided[j].h != p.h || items[j].Limit.Algorithm != it.Limit.Algorithm || items[j].Key != it.Key
		}
	}
	if ok {
		return nil
	}
	// The slow path: an unknown limit or an invalid input.
	if err := storekit.ValidateItems(items, results); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	for i := range items {
		decided[i] = pending{h: s.keyHash(items[i].Key), li: s.known(&items[i].Limit)}
		if decided[i].li == nil {
			decided[i].li = s.learn(items[i].Limit)
		}
	}
	return nil
}

func limitSlot(l *tokenlimit.Limit) int {
	h := uint64(l.Quota)*0x9e3779b97f4a7c15 ^ uint64(l.Period)*0xc2b2ae3d27d4eb4f ^ uint64(l.Burst) ^ uint64(l.Offset) ^ uint64(l.Algorithm)
	return int(h >> 58 & (limitSlots - 1))
}

// known returns the parameters of *l if it is remembered as valid, else nil.
func (s *Store) known(l *tokenlimit.Limit) *limitInfo {
	if li := s.limits[limitSlot(l)].Load(); li != nil && sameLimit(&li.lim, l) {
		return li
	}
	return nil
}

// sameLimit is *a == *b, field by field: cheaper than the struct comparison,
// which calls a generated function.
func sameLimit(a, b *tokenlimit.Limit) bool {
	return a.Quota == b.Quota && a.Period == b.Period && a.Algorithm == b.Algorithm && a.Burst == b.Burst && a.Offset == b.Offset
}

// learn derives the parameters of l, which is valid, and remembers them.
func (s *Store) learn(l tokenlimit.Limit) *limitInfo {
	li := &limitInfo{lim: l, capacity: l.Capacity(), w: window(l)}
	if l.Algorithm == tokenlimit.TokenBucket || l.Algorithm == tokenlimit.GCRA {
		li.b, li.bucketed = bucket(l), true
	}
	s.limits[limitSlot(&l)].Store(li)
	return li
}

// micros is now in µs, checked as storekit.ValidateTime does (with its
// error) from the seconds and µs since the epoch, which are cheaper to
// compare than times.
func micros(now time.Time) (int64, error) {
	if s := now.Unix(); s >= 0 && s <= storekit.MaxExact/1_000_000 {
		// now.UnixMicro(), without decoding the seconds again.
		if t := s*1_000_000 + int64(now.Nanosecond()/1000); t < storekit.MaxExact {
			return t, nil
		}
	}
	return 0, fmt.Errorf("memstore: %w", storekit.ValidateTime("now", now))
}

// decide runs the item's algorithm for cost on p's entry, without storing,
// and records the state to store and the outcome in p.
func (s *Store) decide(p *pending, it *tokenlimit.Item, cost, now int64) {
	e := p.e
	var st [3]int64
	if e != nil {
		st = e.s
	}
	switch it.Limit.Algorithm {
	case tokenlimit.FixedWindow:
		c, out := p.li.w.Fixed(algo.Counter{Start: st[0], Count: st[1]}, now, cost)
		p.state, p.out = [3]int64{c.Start, c.Count}, out
	case tokenlimit.SlidingCounter:
		c, out := p.li.w.Sliding(algo.Pair{Start: st[0], Cur: st[1], Prev: st[2]}, now, cost)
		p.state, p.out = [3]int64{c.Start, c.Cur, c.Prev}, out
	case tokenlimit.SlidingLog:
		var log algo.Log
		if e != nil {
			p.li.w.Trim(e.log, now)
			log = *e.log
		}
		p.out = p.li.w.Decide(&log, now, cost)
	default:
		tat, out := p.li.b.Check(algo.TAT{Tat: st[0], Frac: st[1]}, now, cost)
		p.state, p.out = [3]int64{tat.Tat, tat.Frac}, out
	}
}

// reportUncharged replaces the outcomes of the items that would have fit,
// in a check that was denied as a whole, by their uncharged state.
func (s *Store) reportUncharged(items []tokenlimit.Item, decided []pending, now int64) {
	for i := range decided {
		if decided[i].out.Allowed && items[i].Cost > 0 {
			s.decide(&decided[i], &items[i], 0, now)
		}
	}
}

// commit stores every charged item's new state. Keys are created only if
// all of them, and extra more (a reservation's record), fit under MaxKeys,
// so a full store changes nothing.
func (s *Store) commit(items []tokenlimit.Item, decided []pending, now int64, extra int) error {
	created := extra
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
			e = s.create(p.h, it.Limit.Algorithm, it.Key)
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

// result sets *r to the Result of *out under the limit.
func (li *limitInfo) result(r *tokenlimit.Result, out *algo.Outcome) {
	*r = tokenlimit.Result{
		Allowed:          out.Allowed,
		Limit:            li.capacity,
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
	if err := storekit.ValidateAdjustments(adjustments); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	t, err := micros(now)
	if err != nil {
		return err
	}
	var buf [4]pending
	keys := buf[:0]
	for _, a := range adjustments {
		keys = append(keys, pending{h: s.keyHash(a.Key)})
	}
	var locks lockSet
	s.lock(&locks, keys, t)
	defer s.unlock(&locks)
	return s.adjustLocked(adjustments, keys, t)
}

// adjustLocked applies adjustments, whose key hashes keys holds, at t: all,
// or none when the keys they create do not fit. The caller holds their
// shard locks.
func (s *Store) adjustLocked(adjustments []tokenlimit.Adjustment, keys []pending, t int64) error {
	created := 0
	for i, a := range adjustments {
		if a.Delta > 0 && s.lookup(keys[i].h, a.Limit.Algorithm, a.Key) == nil {
			created++
		}
	}
	if err := s.reserveKeys(created); err != nil {
		return err
	}
	for i, a := range adjustments {
		s.adjust(keys[i].h, a, t)
	}
	return nil
}

// adjust applies one adjustment to the key whose hash is h, creating the
// entry (already counted) if needed and deleting it if it ends up empty.
func (s *Store) adjust(h uint64, a tokenlimit.Adjustment, now int64) {
	e := s.lookup(h, a.Limit.Algorithm, a.Key)
	if e == nil && a.Delta < 0 {
		return // nothing is held to refund: the budget is whole
	}
	if e == nil {
		e = s.create(h, a.Limit.Algorithm, a.Key)
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
		b := bucket(a.Limit)
		tat, keep = b.Adjust(algo.TAT{Tat: e.s[0], Frac: e.s[1]}, now, a.Delta)
		e.s = [3]int64{tat.Tat, tat.Frac}
	}
	e.expires = now + keep
	if keep == 0 {
		s.remove(h, a.Limit.Algorithm, a.Key)
	}
}

// Reset implements tokenlimit.Store.
func (s *Store) Reset(_ context.Context, key string, alg tokenlimit.Algorithm) error {
	if err := storekit.ValidateKey(key, alg); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	h := s.keyHash(key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s.remove(h, alg, key)
	return nil
}

var _ tokenlimit.LogReader = (*Store)(nil)

// LogEntries implements tokenlimit.LogReader.
func (s *Store) LogEntries(_ context.Context, key string, limit tokenlimit.Limit, now time.Time) ([]tokenlimit.LogEntry, error) {
	if err := storekit.ValidateItem(tokenlimit.Item{Key: key, Limit: limit}); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	if limit.Algorithm != tokenlimit.SlidingLog {
		return nil, fmt.Errorf("memstore: %s has no log: %w", limit.Algorithm, tokenlimit.ErrInvalid)
	}
	t, err := micros(now)
	if err != nil {
		return nil, err
	}
	h := s.keyHash(key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.lookup(h, limit.Algorithm, key)
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
	return algo.NewBucket(l.Capacity(), num, den)
}
