package resilient

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// This file keeps each leased budget's leases on this replica: a holder
// per budget (key and algorithm) with at most maxLiveLeases leases that
// have cost left (the current one and the next, taken ahead of time), the
// take in flight, and when the store last denied a take. Calls pay from
// the oldest lease first; a holder takes the next lease in the background
// once what is left falls below half a lease (or, for a bucket, once its
// newest lease is in the last quarter of its life), so that a busy budget
// never waits on the store; a budget's first call waits for its first
// lease. A lease is returned when it expires (a timer on the Failover's
// clock), when its limit changes, and when the Failover closes.

// maxLiveLeases is the most leases with cost left a holder keeps: the
// current one and the next.
const maxLiveLeases = 2

// leaseRetry is how long a failed return waits before it is tried again
// (the record's TTL bounds the tries), and how long a holder whose take
// failed waits before it takes again.
const leaseRetry = time.Second

// leaseShards is the number of locks the table of holders is split under.
const leaseShards = 16

// LeaseEvent is what happened to a lease, for metrics (Observer.Lease).
type LeaseEvent uint8

// The events and the amounts they carry.
const (
	// LeaseTaken: a lease was taken; the amount is its size.
	LeaseTaken LeaseEvent = iota
	// LeaseDenied: the store had less than a lease left; calls are
	// decided on the store until it could have one (amount: the size).
	LeaseDenied
	// LeaseFailed: a take failed (the store failed); amount 0.
	LeaseFailed
	// LeaseReturned: the unused part of a lease (the amount) was refunded.
	LeaseReturned
	// LeaseStood: the unused part of a lease (the amount) could not be
	// returned (its record expired while the store failed, or the
	// Failover closed first): its charge stands.
	LeaseStood
)

// String names the event.
func (e LeaseEvent) String() string {
	return [...]string{"taken", "denied", "failed", "returned", "stood"}[e]
}

// LeaseStats is what one limit's leases hold on this replica now, and
// what became of its leases since the Failover was made.
type LeaseStats struct {
	// Outstanding is how many leases are held (taken and not yet ended).
	Outstanding int
	// Leased is their total size; Unused what they can still admit.
	Leased, Unused int64
	// Taken, Denied and Failed count the takes by outcome (LeaseTaken,
	// LeaseDenied, LeaseFailed).
	Taken, Denied, Failed int64
	// Returned and Stood are the unused parts of ended leases, in the
	// limit's units: refunded to the store (LeaseReturned), or left
	// charged (LeaseStood).
	Returned, Stood int64
}

// add is s with o's counts added, as for one limit over several stores.
func (s LeaseStats) add(o LeaseStats) LeaseStats {
	return LeaseStats{
		Outstanding: s.Outstanding + o.Outstanding, Leased: s.Leased + o.Leased, Unused: s.Unused + o.Unused,
		Taken: s.Taken + o.Taken, Denied: s.Denied + o.Denied, Failed: s.Failed + o.Failed,
		Returned: s.Returned + o.Returned, Stood: s.Stood + o.Stood,
	}
}

// leaseTotals are one limit's leases on this replica, kept as they change
// so that listing them costs the same whatever the number of budgets
// (walking 100,000 holders took 53-59 ms, BenchmarkLeaseStats):
//
//   - events are its lease events since the table was made: the counts of
//     LeaseTaken, LeaseDenied and LeaseFailed, and the amounts of
//     LeaseReturned and LeaseStood, indexed by LeaseEvent;
//   - outstanding, leased and unused are the count, total size and unused
//     part of the leases its holders list now (lease.list).
//
// Safe for concurrent use; each field is read atomically, not all at once.
type leaseTotals struct {
	events                      [LeaseStood + 1]atomic.Int64
	outstanding, leased, unused atomic.Int64
}

// count adds an event: 1 for a take's outcome, the amount for a return.
func (t *leaseTotals) count(ev LeaseEvent, amount int64) {
	switch ev {
	case LeaseReturned, LeaseStood:
		t.events[ev].Add(amount)
	default:
		t.events[ev].Add(1)
	}
}

// stats is t as LeaseStats.
func (t *leaseTotals) stats() LeaseStats {
	e := &t.events
	return LeaseStats{Outstanding: int(t.outstanding.Load()), Leased: t.leased.Load(), Unused: t.unused.Load(),
		Taken: e[LeaseTaken].Load(), Denied: e[LeaseDenied].Load(), Failed: e[LeaseFailed].Load(),
		Returned: e[LeaseReturned].Load(), Stood: e[LeaseStood].Load()}
}

// leaseKey names a budget as the stores do.
type leaseKey struct {
	key string
	alg tokenlimit.Algorithm
}

// holder is one budget's leases on this replica. mu guards every field
// and the mutable fields of its leases.
type holder struct {
	mu    sync.Mutex
	key   leaseKey
	limit tokenlimit.Limit
	terms tokenlimit.Lease
	name  string // the limit's name, for metrics
	// leases are the active leases with cost left, oldest first: at most
	// maxLiveLeases, and one more while a rollback gives cost back to a
	// used-up lease. A used-up lease leaves the list at once but stays
	// active until its end, when its timer returns whatever a rollback
	// gave back to it.
	leases []*lease
	// taking is the take in flight, nil when none.
	taking *leaseTake
	// dry: no take before it (the store denied or failed the last one).
	dry time.Time
	// last is the store's answer to the last take, at lastAt.
	last   tokenlimit.Result
	lastAt time.Time
	// gone is set once the holder left the table: callers look again.
	gone bool
}

// leaseTake is a take in flight; done is closed when it ends.
type leaseTake struct{ done chan struct{} }

// leaseTicket records what a call paid from a holder's leases, to give it
// back if the call is refused after all, or to refund part of it when a
// reservation settles (leasereserve.go).
type leaseTicket struct {
	h *holder
	// parts are the leases paid from, oldest first: a call pays from at
	// most this many (the current lease, the next, and one a rollback or
	// a refund gave cost back to).
	parts [ticketParts]leasePart
}

// ticketParts is the most leases one call pays from.
const ticketParts = maxLiveLeases + 1

type leasePart struct {
	l *lease
	n int64
}

// leases is a Failover's table of holders. It is safe for concurrent use.
type leases struct {
	f       *Failover
	seed    maphash.Seed
	prefix  string // of lease ids: a random id of this table and "/lease/"
	seq     atomic.Uint64
	after   func(d time.Duration, fn func()) (stop func() bool)
	maxKeys int64
	n       atomic.Int64 // holders in the table
	shards  [leaseShards]leaseShard
	// closed is set, under mu, by close; wg counts the takes and returns
	// in flight, each counted in under mu's read lock (begin).
	mu     sync.RWMutex
	closed atomic.Bool
	wg     sync.WaitGroup
	busy   atomic.Int64 // wg's count, for tests
	// closing is closed once close has returned every lease: returns
	// waiting to try again give up.
	closing chan struct{}
	// totals are each limit's lease events and what its leases hold, by
	// the limit's name (names come from the policies, so the map is
	// bounded like their metrics).
	totals sync.Map // string -> *leaseTotals
}

type leaseShard struct {
	mu sync.RWMutex
	m  map[leaseKey]*holder
}

func newLeases(f *Failover, maxKeys int, after func(time.Duration, func()) func() bool) *leases {
	ls := &leases{f: f, seed: maphash.MakeSeed(), prefix: tokenlimit.NewID() + "/lease/", after: after, maxKeys: int64(maxKeys),
		closing: make(chan struct{})}
	for i := range ls.shards {
		ls.shards[i].m = map[leaseKey]*holder{}
	}
	return ls
}

func (ls *leases) shard(k leaseKey) *leaseShard {
	return &ls.shards[maphash.String(ls.seed, k.key)%leaseShards]
}

// holderOf returns the holder of it's budget, made if it has none, or nil
// when the table is full or closed.
func (ls *leases) holderOf(it tokenlimit.Item, p Policy) *holder {
	k := leaseKey{key: it.Key, alg: it.Limit.Algorithm}
	h := ls.lookup(k)
	if h != nil || ls.closed.Load() || ls.n.Load() >= ls.maxKeys {
		return h
	}
	sh := ls.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if h = sh.m[k]; h == nil {
		h = &holder{key: k, limit: it.Limit, terms: p.Lease, name: p.Limit}
		sh.m[k] = h
		ls.n.Add(1)
	}
	return h
}

// lookup returns the holder of the budget k, nil when it has none.
func (ls *leases) lookup(k leaseKey) *holder {
	sh := ls.shard(k)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[k]
}

// pay pays it's cost from the leases of its budget at now, waiting for a
// take when there is none to pay from (a budget's first call, or one
// faster than its takes). ok reports that it was paid: t then records
// what for a rollback, and r is the item's result. A call that is not
// paid is decided on the store; err is the caller's context error when it
// gave up waiting.
func (ls *leases) pay(ctx context.Context, it tokenlimit.Item, p Policy, now time.Time, t *leaseTicket, r *tokenlimit.Result) (ok bool, err error) {
	for waited := false; ; {
		h := ls.holderOf(it, p)
		if h == nil {
			return false, nil
		}
		h.mu.Lock()
		if h.gone {
			h.mu.Unlock()
			continue
		}
		ended := h.refresh(it.Limit, p, now)
		paid := h.pay(it.Cost, t)
		if paid {
			h.result(r, now)
		}
		var wait *leaseTake
		if !paid && !waited && h.taking == nil && ls.mayTake(h, now) {
			ls.startTake(h)
		}
		if paid && h.needsNext(now) && ls.mayTake(h, now) {
			ls.startTake(h)
		}
		if !paid && !waited {
			wait = h.taking
		}
		h.mu.Unlock()
		ls.giveBackAll(ended)
		if paid || wait == nil {
			return paid, nil
		}
		select {
		case <-wait.done:
			waited, now = true, ls.f.clock()
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// peek sets r to it's budget as this replica's leases see it at now
// (holder.result) and reports true when it holds a live lease of it on
// the limit and terms of p; it takes nothing and starts no take.
func (ls *leases) peek(it tokenlimit.Item, p Policy, now time.Time, r *tokenlimit.Result) bool {
	h := ls.lookup(leaseKey{key: it.Key, alg: it.Limit.Algorithm})
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	live := slices.ContainsFunc(h.leases, func(l *lease) bool { return now.Before(l.expires) })
	if h.gone || !live || h.limit != it.Limit || h.terms != p.Lease {
		return false
	}
	h.result(r, now)
	return true
}

// mayTake reports whether h may take a lease at now: none in flight, the
// store has not denied or failed one lately, fewer than maxLiveLeases
// with cost left, and the table open. h.mu is held.
func (ls *leases) mayTake(h *holder, now time.Time) bool {
	return h.taking == nil && !now.Before(h.dry) && h.live() < maxLiveLeases && !ls.closed.Load()
}

// refresh ends h's leases that expired by now, and every lease when the
// limit or its terms changed (a reload), returning them to give back.
// h.mu is held.
func (h *holder) refresh(limit tokenlimit.Limit, p Policy, now time.Time) (ended []*lease) {
	if h.limit != limit || h.terms != p.Lease {
		ended = h.endAll()
		h.limit, h.terms, h.name, h.dry = limit, p.Lease, p.Limit, time.Time{}
		return ended
	}
	keep := h.leases[:0]
	for _, l := range h.leases {
		switch {
		case !now.Before(l.expires):
			l.markEnded()
			ended = append(ended, l)
		default:
			keep = append(keep, l)
		}
	}
	clear(h.leases[len(keep):])
	h.leases = keep
	return ended
}

// endAll ends every lease of h and returns them to give back. h.mu is
// held.
func (h *holder) endAll() []*lease {
	ended := h.leases
	for _, l := range ended {
		l.markEnded()
	}
	h.leases = nil
	return ended
}

// live is how many of h's leases have cost left. h.mu is held.
func (h *holder) live() int { return len(h.leases) }

// unused is what h's leases can still admit. h.mu is held.
func (h *holder) unused() int64 {
	var n int64
	for _, l := range h.leases {
		n += l.unused()
	}
	return n
}

// pay takes cost from h's leases, oldest first, recording it in t, and
// drops the leases it uses up from the list; it takes nothing when the
// oldest len(t.parts) of them hold less than cost. h.mu is held.
func (h *holder) pay(cost int64, t *leaseTicket) bool {
	var held int64
	for _, l := range h.leases[:min(len(h.leases), len(t.parts))] {
		held += l.unused()
	}
	if held < cost {
		return false
	}
	t.h = h
	used := 0
	for j, l := range h.leases {
		n := min(cost, l.unused())
		l.use(n)
		t.parts[j] = leasePart{l: l, n: n}
		if l.unused() == 0 {
			used++
		}
		if cost -= n; cost == 0 {
			break
		}
	}
	if used > 0 { // the oldest ones: a lease is used up before the next is touched
		for _, l := range h.leases[:used] {
			l.unlist()
		}
		n := copy(h.leases, h.leases[used:])
		clear(h.leases[n:])
		h.leases = h.leases[:n]
	}
	return true
}

// needsNext reports whether h should take its next lease at now: what is
// left is below half a lease, or, for a bucket, its newest lease is in
// the last quarter of its life. h.mu is held.
func (h *holder) needsNext(now time.Time) bool {
	if h.unused() < (h.terms.Size+1)/2 {
		return true
	}
	bucket := h.key.alg != tokenlimit.FixedWindow
	newest := h.leases[len(h.leases)-1]
	return bucket && !now.Before(newest.expires.Add(-h.terms.TTL/4))
}

// result sets r to a paid call's result: allowed, with what the store had
// left at the last take plus what h's leases hold (at most the capacity)
// as Remaining, and the last take's ResetAfter less the time since. h.mu
// is held.
func (h *holder) result(r *tokenlimit.Result, now time.Time) {
	capacity := h.limit.Capacity()
	*r = tokenlimit.Result{Allowed: true, Limit: capacity, Remaining: min(capacity, h.last.Remaining+h.unused()),
		ResetAfter: max(0, h.last.ResetAfter-now.Sub(h.lastAt))}
}

// rollback gives back what t paid, to the leases still active (a lease
// used up by it goes back into its holder's list); what a lease ended
// meanwhile cannot take back stays charged, and is not admitted.
func (t *leaseTicket) rollback() {
	h := t.h
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range t.parts {
		if p.l != nil && p.l.state == leaseActive {
			h.restore(p.l, p.n)
		}
	}
}

// restore gives n back to l, an active lease of h that paid at least n;
// a lease used up goes back into h's list. h.mu is held.
func (h *holder) restore(l *lease, n int64) {
	if l.unused() == 0 && n > 0 && !h.gone {
		h.leases = insertLease(h.leases, l)
		l.list()
	}
	l.use(-n)
}

// refund gives n of what t paid back at now (a reservation settled below
// its estimate), the newest lease first: to each lease still active, and
// as the returned parts to each lease that has ended (its return settled
// it to what it had paid, n included), to refund on the store at its
// charge time. A lease past its end whose timer has not run yet is ended
// here. n is at most what t paid.
func (ls *leases) refund(t *leaseTicket, n int64, now time.Time) (ended [ticketParts]leasePart) {
	h := t.h
	var expired []*lease
	h.mu.Lock()
	for j := len(t.parts) - 1; j >= 0 && n > 0; j-- {
		p := t.parts[j]
		if p.l == nil {
			continue
		}
		k := min(n, p.n)
		n -= k
		if p.l.state == leaseActive && !now.Before(p.l.expires) {
			p.l.markEnded()
			h.leases = removeLease(h.leases, p.l)
			expired = append(expired, p.l)
		}
		if p.l.state == leaseActive {
			h.restore(p.l, k)
		} else {
			ended[j] = leasePart{l: p.l, n: k}
		}
	}
	h.mu.Unlock()
	ls.giveBackAll(expired)
	return ended
}

// payMore pays cost from h's leases at now, as pay does without waiting
// for a take (a reservation's extra charge): false when h left the table,
// its limit or terms changed (a reload), or its leases hold less.
func (ls *leases) payMore(h *holder, limit tokenlimit.Limit, p Policy, cost int64, now time.Time) bool {
	h.mu.Lock()
	if h.gone || h.limit != limit || h.terms != p.Lease {
		h.mu.Unlock()
		return false
	}
	ended := h.refresh(limit, p, now)
	var t leaseTicket
	paid := h.pay(cost, &t)
	if paid && h.needsNext(now) && ls.mayTake(h, now) {
		ls.startTake(h)
	}
	h.mu.Unlock()
	ls.giveBackAll(ended)
	return paid
}

// insertLease inserts l into ls, which is ordered by end, keeping the
// order.
func insertLease(ls []*lease, l *lease) []*lease {
	i := 0
	for i < len(ls) && !l.expires.Before(ls[i].expires) {
		i++
	}
	return slices.Insert(ls, i, l)
}

// startTake starts taking a lease for h in the background. h.mu is held.
func (ls *leases) startTake(h *holder) {
	if !ls.begin() {
		return
	}
	tk := &leaseTake{done: make(chan struct{})}
	h.taking = tk
	go ls.take(h, tk, h.key, h.limit, h.terms, h.name)
}

// begin counts a goroutine of the table in, unless it is closed.
func (ls *leases) begin() bool {
	ls.mu.RLock()
	defer ls.mu.RUnlock()
	if ls.closed.Load() {
		return false
	}
	ls.wg.Add(1)
	ls.busy.Add(1)
	return true
}

// end counts a goroutine counted in by begin out.
func (ls *leases) end() {
	ls.busy.Add(-1)
	ls.wg.Done()
}

// take reserves a lease of terms.Size on the store and gives it to h, or
// notes that the store denied or failed it.
func (ls *leases) take(h *holder, tk *leaseTake, k leaseKey, limit tokenlimit.Limit, terms tokenlimit.Lease, name string) {
	defer ls.end()
	defer close(tk.done)
	id := ls.prefix + strconv.FormatUint(ls.seq.Add(1), 10)
	req := tokenlimit.ReserveRequest{ID: id, Items: []tokenlimit.Item{{Key: k.key, Limit: limit, Cost: terms.Size}}, TTL: recordTTL(terms)}
	var res [1]tokenlimit.Result
	var out tokenlimit.ReserveOutcome
	sent := ls.f.clock()
	failed, err := ls.f.call(context.Background(), opLease, func(ctx context.Context) error {
		// What the budget admitted locally in an outage is counted first.
		if err := ls.f.writeBack(ctx, req.Items); err != nil {
			return err
		}
		var err error
		out, err = storekit.Reserve(ctx, ls.f.store, sent, req, res[:])
		return err
	})
	now := ls.f.clock()
	h.mu.Lock()
	h.taking = nil
	var taken *lease
	switch {
	case failed || err != nil:
		h.dry = now.Add(leaseRetry)
		ls.observe(name, LeaseFailed, 0)
		if err != nil && !errors.Is(err, tokenlimit.ErrStoreFull) {
			ls.f.log.Error("taking a lease failed", "limit", name, "error", err)
		}
	case out.Status == tokenlimit.Denied && res[0].CostExceedsLimit: // a lease larger than the limit
		h.dry = now.Add(tokenlimit.MaxPeriod)
		ls.observe(name, LeaseDenied, terms.Size)
	case out.Status == tokenlimit.Denied:
		h.dry = now.Add(res[0].RetryAfter)
		h.last, h.lastAt = res[0], now
		ls.observe(name, LeaseDenied, terms.Size)
	case out.Status == tokenlimit.Reserved:
		taken = &lease{id: id, size: terms.Size, name: name, record: recordTTL(terms), recordEnd: sent.Add(recordTTL(terms)),
			chargedAt: out.At, expires: leaseEnd(sent, limit, terms, res[0]), totals: ls.totalsOf(name)}
		h.last, h.lastAt = res[0], now
		ls.observe(name, LeaseTaken, terms.Size)
	default: // a fresh id cannot replay, conflict or be closed
		h.dry = now.Add(leaseRetry)
		ls.f.log.Error("taking a lease: unexpected answer", "limit", name, "status", out.Status)
	}
	if taken == nil {
		dry := h.dry
		h.mu.Unlock()
		// Kept while dry, so that calls go to the store without trying
		// to take a lease each; dropped after, if still idle.
		ls.after(dry.Sub(now), func() { ls.dropIfIdle(h) })
		return
	}
	if h.gone || h.limit != limit || h.terms != terms || ls.closed.Load() {
		h.mu.Unlock()
		taken.markEnded()
		ls.giveBack(taken)
		return
	}
	h.leases = append(h.leases, taken)
	taken.list()
	taken.stop = ls.after(taken.expires.Sub(now), func() { ls.expire(h, taken) })
	h.mu.Unlock()
}

// leaseEnd is when a lease taken at sent ends: its TTL later, or, for a
// fixed window, when the window the store charged it in ends (r is the
// store's answer: a charged window resets at its end) if that is sooner.
func leaseEnd(sent time.Time, limit tokenlimit.Limit, terms tokenlimit.Lease, r tokenlimit.Result) time.Time {
	life := terms.TTL
	if limit.Algorithm == tokenlimit.FixedWindow {
		life = min(life, r.ResetAfter)
	}
	return sent.Add(life)
}

// expire ends l, held by h, at its end, returns it, and drops h from the
// table if it holds nothing more.
func (ls *leases) expire(h *holder, l *lease) {
	if !ls.begin() {
		return // close ended it
	}
	defer ls.end()
	h.mu.Lock()
	if l.state != leaseActive {
		h.mu.Unlock()
		return
	}
	l.markEnded()
	h.leases = removeLease(h.leases, l)
	h.mu.Unlock()
	ls.giveBack(l)
	ls.dropIfIdle(h)
}

func removeLease(ls []*lease, l *lease) []*lease {
	for i, x := range ls {
		if x == l {
			copy(ls[i:], ls[i+1:])
			ls[len(ls)-1] = nil
			return ls[:len(ls)-1]
		}
	}
	return ls
}

// dropIfIdle removes h from the table when it holds no lease and takes
// none.
func (ls *leases) dropIfIdle(h *holder) {
	sh := ls.shard(h.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone || len(h.leases) > 0 || h.taking != nil || ls.f.clock().Before(h.dry) {
		return
	}
	h.gone = true
	if sh.m[h.key] == h {
		delete(sh.m, h.key)
		ls.n.Add(-1)
	}
}

// giveBackAll returns ended leases in the background.
func (ls *leases) giveBackAll(ended []*lease) {
	for _, l := range ended {
		if !ls.begin() {
			ls.observe(l.name, LeaseStood, l.unused())
			continue
		}
		go func() {
			defer ls.end()
			ls.giveBack(l)
		}()
	}
}

// giveBack returns what l did not use: it settles l's reservation to what
// was used, which refunds the rest once (only to a window the charge
// still counts in). While the store fails it tries again every leaseRetry
// until the record is about to expire; then, or once the table is closed,
// the charge stands.
func (ls *leases) giveBack(l *lease) {
	if l.stop != nil {
		l.stop()
	}
	unused := l.unused()
	if unused == 0 {
		return
	}
	req := tokenlimit.SettleRequest{ID: l.id, Actual: l.used, TTL: l.record}
	for {
		st, failed, err := ls.f.settleRemote(context.Background(), req)
		switch {
		case err != nil:
			ls.f.log.Error("returning a lease was refused", "limit", l.name, "error", err)
			ls.observe(l.name, LeaseStood, unused)
			return
		case !failed && st == tokenlimit.UnknownReservation: // its record expired
			ls.observe(l.name, LeaseStood, unused)
			return
		case !failed:
			ls.observe(l.name, LeaseReturned, unused)
			return
		}
		if ls.closed.Load() || !ls.f.clock().Add(leaseRetry).Before(l.recordEnd) || !ls.sleep(leaseRetry) {
			ls.observe(l.name, LeaseStood, unused)
			return
		}
	}
}

// sleep waits d on the Failover's clock; false if the table closed first.
func (ls *leases) sleep(d time.Duration) bool {
	done := make(chan struct{})
	stop := ls.after(d, func() { close(done) })
	defer stop()
	select {
	case <-done:
		return true
	case <-ls.closing:
		return false
	}
}

// observe counts a lease event in the limit's totals and reports it to
// the Failover's observer.
func (ls *leases) observe(name string, ev LeaseEvent, amount int64) {
	ls.totalsOf(name).count(ev, amount)
	if ls.f.observer.Lease != nil {
		ls.f.observer.Lease(name, ev, amount)
	}
}

// totalsOf returns the totals of the limit named name.
func (ls *leases) totalsOf(name string) *leaseTotals {
	t, ok := ls.totals.Load(name)
	if !ok {
		t, _ = ls.totals.LoadOrStore(name, new(leaseTotals))
	}
	return t.(*leaseTotals)
}

// endAll ends and removes every holder's leases, for returnAll and close.
func (ls *leases) endAll() []*lease {
	var ended []*lease
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for k, h := range sh.m {
			h.mu.Lock()
			ended = append(ended, h.endAll()...)
			h.gone = true
			h.mu.Unlock()
			delete(sh.m, k)
			ls.n.Add(-1)
		}
		sh.mu.Unlock()
	}
	return ended
}

// returnAll returns every lease now and waits for the returns, or for ctx.
func (ls *leases) returnAll(ctx context.Context) error {
	ended := ls.endAll()
	var wg sync.WaitGroup
	for _, l := range ended {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls.giveBack(l)
		}()
	}
	return waitFor(ctx, wg.Wait)
}

// close stops taking leases and returns every lease; it waits for the
// takes and returns in flight, or for ctx. Leases a take brings in later
// are returned at once.
func (ls *leases) close(ctx context.Context) error {
	ls.mu.Lock()
	first := ls.closed.CompareAndSwap(false, true)
	ls.mu.Unlock()
	if !first {
		return nil
	}
	err := ls.returnAll(ctx)
	close(ls.closing)
	if err != nil {
		return err
	}
	return waitFor(ctx, ls.wg.Wait)
}

// waitFor runs wait and returns nil once it returns, or ctx's error if
// ctx ends first.
func waitFor(ctx context.Context, wait func()) error {
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stats returns what each limit's leases hold and their totals, by limit
// name, for every limit that asked for a lease.
func (ls *leases) stats() map[string]LeaseStats {
	out := map[string]LeaseStats{}
	ls.totals.Range(func(name, t any) bool {
		out[name.(string)] = t.(*leaseTotals).stats()
		return true
	})
	return out
}
