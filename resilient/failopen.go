package resilient

import (
	"context"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/budgetslot"
)

// This file bounds what fail-open limits admit while the store fails. For
// each fail-open budget its caller (the service) remembers the last answer the store gave
// (how much was left, and until when that answer says anything) and what
// the local budget admitted since:
//
//   - when the store fails, the local budget of a key starts where the store
//     left it, scaled by fail_open_share: remaining × share of the share's
//     capacity, refilling from the time the store answered; with no answer
//     remembered (or one past its reset) it starts whole, at share × limit;
//   - once the store answers again, the cost admitted locally is charged to
//     the store (written back) before the next call for that budget, so that
//     after an outage the store counts what every replica admitted;
//   - for a while after that (the recovery, below) the budget still keeps to its
//     local share: a request is admitted only if the local budget admits it
//     too, so that no replica is granted by the store what another replica
//     admitted locally and has not written back yet.
//
// Memory is bounded: at most maxKeys (NewFailOpen) budgets are remembered;
// an entry is useless once its budget would be whole again (the answer's
// own reset), nothing admitted locally waits to be written back and its
// recovery is over, and past the bound the entry whose usefulness ends
// first among a few sampled ones is evicted (like Redis' sampled eviction).

// failOpenShards spreads the remembered answers over locks.
const failOpenShards = 64

// evictionSamples entries are looked at to choose one to evict.
const evictionSamples = 8

// Write-back outcomes, the result label of tokenlimit_fail_open_writeback_total.
const (
	WritebackOK      = "ok"      // charged to the store
	WritebackFailed  = "failed"  // the store call failed: kept, to be tried again
	WritebackExpired = "expired" // the budget would have refilled it by then
	WritebackEvicted = "evicted" // forgotten to stay within maxKeys
)

// Policy is what one item of a store call does while the store fails.
// The zero value fails closed.
type Policy struct {
	// Open: the item is decided on a local budget of Share of its limit
	// (0 < Share <= 1); otherwise a failing store makes the request
	// unavailable.
	Open  bool
	Share float64
	// Limit names the item's limit, for the write-back metrics.
	Limit string
	// Shadow items are only reported: their answers are not remembered,
	// and while the store fails they are not decided (as fail-closed ones).
	Shadow bool
	// Concurrency items are slots of a concurrency limit, released by the
	// store at the end of their lease alone: what they admit locally is not
	// written back and they do not recover.
	Concurrency bool
	// Lease, when on, lets each replica decide the item from a share of
	// its budget leased from the store (lease.go). The zero value takes
	// none.
	Lease tokenlimit.Lease
	// Store names the store the item's budget lives in, for Stores: ""
	// for the main one.
	Store string
}

// ShareOf scales a limit to a share f of its budget, keeping at least 1.
func ShareOf(l tokenlimit.Limit, f float64) tokenlimit.Limit {
	if f >= 1 {
		return l
	}
	scale := func(v int64) int64 { return max(1, int64(math.Floor(float64(v)*f))) }
	if l.Burst != 0 {
		l.Burst = scale(l.Burst)
	}
	l.Quota = scale(l.Quota)
	return l
}

// FailOpen holds the remembered answers of fail-open budgets. It is safe
// for concurrent use. Its methods take one budget each, named by its item
// (key and algorithm), so that a caller loops over its items without
// building anything.
type FailOpen struct {
	hashSeed   maphash.Seed
	perShard   int
	recovery   time.Duration // Options.FailOpenRecovery
	pending    atomic.Int64  // entries with cost to write back
	recovering atomic.Int64  // entries whose phase is not Remote
	shards     [failOpenShards]failOpenShard
	onDropped  func(limit string, result string, cost int64)
}

type failOpenShard struct {
	mu sync.Mutex
	m  map[uint64]*budgetMemory // by slot (budgetKey.slot), chained
	n  int                      // entries
}

// budgetKey names one budget, as the stores do, with its key's hash under
// the service's seed: the hash picks the shard and, mixed with the
// algorithm, the map slot, so a budget is hashed once per call. Distinct
// budgets that share a slot are chained (budgetMemory.next), and an entry
// is its budget's only if key and algorithm are equal: a collision never
// mixes two budgets' answers.
type budgetKey struct {
	key  string
	alg  tokenlimit.Algorithm
	hash uint64
}

// slot is k's map key in its shard.
func (k budgetKey) slot() uint64 { return budgetslot.Of(k.hash, k.alg) }

// budgetMemory is what the service knows of one fail-open budget.
type budgetMemory struct {
	// The budget, and the next entry of its slot.
	key  string
	alg  tokenlimit.Algorithm
	next *budgetMemory
	// The store's last answer: remaining of capacity at time at; whole again
	// at reset. known is false for an entry made by a local admission alone.
	known     bool
	remaining int64
	capacity  int64
	at, reset time.Time
	// seeded is set once the local budget has been started from this
	// answer, so that it is started once per outage, not per request.
	seeded bool
	// Cost admitted locally and not yet written back, for limit (its name,
	// for metrics); worthless after until, when the budget would have
	// refilled it.
	pending int64
	limit   string
	until   time.Time
	// phase is where the budget is around an outage (Budget's
	// table): Local once the local budget answered for it, Recovering once
	// the store answered again, Remote when the recovery has ended.
	phase Budget
}

// end is when the entry stops being useful, for recovery the given
// duration.
func (m *budgetMemory) end(recovery time.Duration) time.Time {
	end := m.reset
	if m.pending > 0 && m.until.After(end) {
		end = m.until
	}
	if r := m.phase.RecoveryEnd(recovery); m.phase.State != Remote && r.After(end) {
		end = r
	}
	return end
}

// NewFailOpen remembers at most about maxKeys budgets; recovery is how
// long a budget decided locally keeps to its local budget once the store
// answers again (see Budget); onDropped is told of cost admitted locally
// that is dropped instead of written back (WritebackExpired,
// WritebackEvicted).
func NewFailOpen(maxKeys int, recovery time.Duration, onDropped func(limit, result string, cost int64)) *FailOpen {
	f := &FailOpen{hashSeed: maphash.MakeSeed(), perShard: max(1, maxKeys/failOpenShards), recovery: recovery, onDropped: onDropped}
	for i := range f.shards {
		f.shards[i].m = map[uint64]*budgetMemory{}
	}
	return f
}

// budget returns the budgetKey of key under alg.
func (f *FailOpen) budget(key string, alg tokenlimit.Algorithm) budgetKey {
	return budgetKey{key: key, alg: alg, hash: maphash.String(f.hashSeed, key)}
}

func (f *FailOpen) keyOf(it tokenlimit.Item) budgetKey { return f.budget(it.Key, it.Limit.Algorithm) }

func (f *FailOpen) shard(k budgetKey) *failOpenShard {
	return &f.shards[k.hash%failOpenShards]
}

// find returns k's entry in sh, or nil if it has none. The caller holds
// sh.mu.
func (f *FailOpen) find(sh *failOpenShard, k budgetKey) *budgetMemory {
	for m := sh.m[k.slot()]; m != nil; m = m.next {
		if m.alg == k.alg && m.key == k.key {
			return m
		}
	}
	return nil
}

// lock locks k's shard and returns it with k's entry there, nil if it has
// none. The caller unlocks sh.mu.
func (f *FailOpen) lock(k budgetKey) (sh *failOpenShard, m *budgetMemory) {
	sh = f.shard(k)
	sh.mu.Lock()
	return sh, f.find(sh, k)
}

// lockEntry is lock, making k's entry (evicting at now if full) if it has
// none.
func (f *FailOpen) lockEntry(k budgetKey, now time.Time) (*failOpenShard, *budgetMemory) {
	sh, m := f.lock(k)
	if m == nil {
		m = f.add(sh, k, now)
	}
	return sh, m
}

// add makes k's entry in sh, which has none, evicting at now if full. The
// caller holds sh.mu.
func (f *FailOpen) add(sh *failOpenShard, k budgetKey, now time.Time) *budgetMemory {
	if sh.n >= f.perShard {
		f.evict(sh, now) // may unlink an entry of k's slot
	}
	m := &budgetMemory{key: k.key, alg: k.alg, next: sh.m[k.slot()]}
	sh.m[k.slot()] = m
	sh.n++
	return m
}

// evict drops the sampled entry whose usefulness ends first. The caller
// holds sh.mu.
func (f *FailOpen) evict(sh *failOpenShard, now time.Time) {
	var victim uint64
	var vm *budgetMemory
	n := 0
	for slot, head := range sh.m { // map iteration starts at a random slot
		for m := head; m != nil && n < evictionSamples; m = m.next {
			if vm == nil || m.end(f.recovery).Before(vm.end(f.recovery)) {
				victim, vm = slot, m
			}
			n++
		}
		if n == evictionSamples {
			break
		}
	}
	if vm == nil {
		return
	}
	if vm.pending > 0 {
		f.pending.Add(-1)
		result := WritebackEvicted
		if !now.Before(vm.until) {
			result = WritebackExpired
		}
		f.onDropped(vm.limit, result, vm.pending)
	}
	if vm.phase.State != Remote {
		f.recovering.Add(-1)
	}
	sh.remove(victim, vm)
}

// remove unlinks m from the chain of slot. The caller holds sh.mu.
func (sh *failOpenShard) remove(slot uint64, m *budgetMemory) {
	sh.n--
	head := sh.m[slot]
	switch {
	case head == m && m.next == nil:
		delete(sh.m, slot)
	case head == m:
		sh.m[slot] = m.next
	default:
		for p := head; p.next != nil; p = p.next {
			if p.next == m {
				p.next = m.next
				return
			}
		}
	}
}

// Remember records the store's answer r for item, decided at at, if p is
// fail-open and not shadow. It reads clock only to make an entry or to end
// a recovering budget's wait for the store: a known budget that does not
// recover is remembered without reading the time.
func (f *FailOpen) Remember(item tokenlimit.Item, p Policy, r tokenlimit.Result, at time.Time, clock func() time.Time) {
	if !p.Open || p.Shadow {
		return
	}
	k := f.keyOf(item)
	sh, m := f.lock(k)
	defer sh.mu.Unlock()
	if m == nil {
		m = f.add(sh, k, clock())
	}
	// Answers of concurrent calls arrive in any order: keep the latest,
	// and of answers at the same time the one with less left.
	if !m.known || at.After(m.at) || (at.Equal(m.at) && r.Remaining < m.remaining) || r.Limit != m.capacity {
		m.known, m.seeded = true, false
		m.remaining, m.capacity, m.at, m.reset = r.Remaining, r.Limit, at, at.Add(r.ResetAfter)
	}
	if m.phase.State == Local {
		f.on(m, StoreAnswered, clock(), time.Time{})
	}
}

// Seed starts the local budget of local (item, scaled to its local
// share) from the store's last answer, once per outage: it resets the
// local budget and charges it what the store had counted, scaled, at the
// time the store answered. A budget with no answer remembered keeps its
// local state (whole, if it never failed over).
func (f *FailOpen) Seed(local tokenlimit.Store, item tokenlimit.Item, now time.Time) error {
	k := f.keyOf(item)
	sh, m := f.lock(k)
	defer sh.mu.Unlock()
	return seedOne(local, m, k, item.Limit, now)
}

// seedOne seeds k's budget from m, its entry (nil if none); the caller
// holds m's lock, so that requests failing over at once seed it once, and
// none decides on it half seeded.
func seedOne(local tokenlimit.Store, m *budgetMemory, k budgetKey, localLimit tokenlimit.Limit, now time.Time) error {
	if m == nil || !m.known || m.seeded {
		return nil
	}
	m.seeded = true
	if !now.Before(m.reset) {
		m.remaining = m.capacity // whole again: the local budget starts whole
	}
	localCap := localLimit.Capacity()
	// What was admitted locally and not yet written back is not in the
	// store's answer: it still counts.
	used := localCap - scaled(localCap, m.remaining, m.capacity) + m.pending
	// A budget that fails over again keeps its local state when that has
	// less left: the store's newer answer holds this replica's write-back
	// but not what the other replicas admitted locally and have not yet
	// written back, so seeding higher would hand out their shares again.
	peek := []tokenlimit.Item{{Key: k.key, Limit: localLimit}}
	cur := make([]tokenlimit.Result, 1)
	if _, err := local.Check(context.Background(), now, peek, cur); err != nil {
		return err
	}
	if localCap-cur[0].Remaining >= used {
		return nil
	}
	if err := local.Reset(context.Background(), k.key, k.alg); err != nil {
		return err
	}
	at := m.at
	if at.After(now) { // the store's clock runs ahead of ours
		at = now
	}
	adj := tokenlimit.Adjustment{Key: k.key, Limit: localLimit, Delta: used, ChargedAt: at}
	return local.Adjust(context.Background(), at, []tokenlimit.Adjustment{adj})
}

// scaled returns ⌊localCap × remaining / capacity⌋ exactly, for 0 <=
// remaining <= capacity.
func scaled(localCap, remaining, capacity int64) int64 {
	switch {
	case remaining <= 0 || capacity <= 0:
		return 0
	case remaining >= capacity:
		return localCap
	}
	hi, lo := bits.Mul64(uint64(localCap), uint64(remaining))
	q, _ := bits.Div64(hi, lo, uint64(capacity))
	return int64(q)
}

// Admitted records that the local budget admitted item (r its result at
// at), to write back to the store once it answers; at plus r.ResetAfter
// is when the local budget would be whole again (nothing is written back
// after that). Concurrency slots and items of no cost are not written back.
func (f *FailOpen) Admitted(item tokenlimit.Item, p Policy, r tokenlimit.Result, at, now time.Time) {
	if p.Concurrency || item.Cost == 0 {
		return
	}
	sh, m := f.lockEntry(f.keyOf(item), now)
	defer sh.mu.Unlock()
	if m.pending == 0 {
		f.pending.Add(1)
	}
	m.pending += item.Cost
	m.limit = p.Limit
	if until := at.Add(r.ResetAfter); until.After(m.until) {
		m.until = until
	}
}

// Refunded takes back what Admitted recorded for item (its cost, from
// what waits to be written back): the call that admitted it was refused
// by another store.
func (f *FailOpen) Refunded(item tokenlimit.Item, p Policy) {
	if p.Concurrency || item.Cost == 0 || !f.AnyPending() {
		return
	}
	sh, m := f.lock(f.keyOf(item))
	defer sh.mu.Unlock()
	if m == nil || m.pending == 0 {
		return
	}
	m.pending = max(0, m.pending-item.Cost)
	if m.pending == 0 {
		f.pending.Add(-1)
	}
}

// Writeback is cost admitted locally taken to be charged to the store: one
// adjustment per budget, with its limit's name (for metrics) and the time
// after which the budget would have refilled it. The zero value is empty.
type Writeback struct {
	Adjustments []tokenlimit.Adjustment
	Limits      []string
	untils      []time.Time
}

// AnyPending reports whether any budget has cost waiting to be written
// back: one atomic load.
func (f *FailOpen) AnyPending() bool { return f.pending.Load() > 0 }

// HasPending reports whether item's budget has cost waiting to be written
// back.
func (f *FailOpen) HasPending(item tokenlimit.Item) bool {
	if !f.AnyPending() {
		return false
	}
	sh, m := f.lock(f.keyOf(item))
	defer sh.mu.Unlock()
	return m != nil && m.pending > 0
}

// TakePending removes the cost waiting to be written back for item's
// budget and adds it to w, as an adjustment of item's limit charged at
// now. A budget whose local charges would have refilled by now is dropped
// and reported as expired.
func (f *FailOpen) TakePending(w *Writeback, item tokenlimit.Item, now time.Time) {
	if !f.AnyPending() {
		return
	}
	k := f.keyOf(item)
	sh, m := f.lock(k)
	var cost int64
	var name string
	var until time.Time
	expired := false
	if m != nil && m.pending > 0 {
		cost, name, until, expired = m.pending, m.limit, m.until, !now.Before(m.until)
		m.pending = 0
		f.pending.Add(-1)
	}
	sh.mu.Unlock()
	switch {
	case cost == 0:
	case expired:
		f.onDropped(name, WritebackExpired, cost)
	default:
		w.Adjustments = append(w.Adjustments, tokenlimit.Adjustment{Key: k.key, Limit: item.Limit, Delta: cost, ChargedAt: now})
		w.Limits = append(w.Limits, name)
		w.untils = append(w.untils, until)
	}
}

// PutBack returns to the pending cost what a failed write-back took, to be
// tried again with the next call: a call that failed may still have been
// applied, and charging twice over-counts (denies early) where dropping it
// would admit past the limit.
func (f *FailOpen) PutBack(w Writeback, now time.Time) {
	for i, a := range w.Adjustments {
		sh, m := f.lockEntry(f.budget(a.Key, a.Limit.Algorithm), now)
		if m.pending == 0 {
			f.pending.Add(1)
		}
		m.pending += a.Delta
		m.limit = w.Limits[i]
		if w.untils[i].After(m.until) {
			m.until = w.untils[i]
		}
		sh.mu.Unlock()
	}
}

// on moves m's phase by event e at at (whole: when the local budget would
// be whole again, for LocalAnswered), keeping the count of budgets that
// recover, and reports whether a request must keep to the local budget.
// The caller holds m's lock.
func (f *FailOpen) on(m *budgetMemory, e Event, at, whole time.Time) bool {
	was := m.phase.State
	var hold bool
	m.phase, hold = m.phase.On(e, at, whole, f.recovery)
	switch now := m.phase.State; {
	case was == Remote && now != Remote:
		f.recovering.Add(1)
	case was != Remote && now == Remote:
		f.recovering.Add(-1)
	}
	return hold
}

// AnsweredLocally records that the local budget answered item (scaled to
// its share) at at with r: its budget recovers from now on. Concurrency
// slots are released by the store by themselves: they do not.
func (f *FailOpen) AnsweredLocally(item tokenlimit.Item, p Policy, r tokenlimit.Result, at, now time.Time) {
	if p.Concurrency {
		return
	}
	sh, m := f.lockEntry(f.keyOf(item), now)
	defer sh.mu.Unlock()
	f.on(m, LocalAnswered, at, at.Add(r.ResetAfter))
}

// WrittenBack records that the store took the write-back adjs at now.
func (f *FailOpen) WrittenBack(adjs []tokenlimit.Adjustment, now time.Time) {
	for _, a := range adjs {
		sh, m := f.lock(f.budget(a.Key, a.Limit.Algorithm))
		if m != nil && m.phase.State == Local {
			f.on(m, StoreAnswered, now, time.Time{})
		}
		sh.mu.Unlock()
	}
}

// AnyRecovering reports whether any budget recovers: if none does, no
// request has anything to hold. One atomic load.
func (f *FailOpen) AnyRecovering() bool { return f.recovering.Load() > 0 }

// Recovering reports whether item's budget recovers at now: a request
// must be admitted on its local budget as well as by the store. unseen
// reports that the store has not answered for it since its local budget
// did. A budget whose recovery has ended stops recovering. Shadow items,
// concurrency slots, items of no cost and fail-closed items never recover.
func (f *FailOpen) Recovering(item tokenlimit.Item, p Policy, now time.Time) (recovering, unseen bool) {
	if !f.AnyRecovering() || !p.Open || p.Shadow || p.Concurrency || item.Cost == 0 {
		return false, false
	}
	sh, m := f.lock(f.keyOf(item))
	defer sh.mu.Unlock()
	if m == nil || !f.on(m, Asked, now, time.Time{}) {
		return false, false
	}
	return true, m.phase.State == Local
}
