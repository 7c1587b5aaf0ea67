package service

import (
	"sync"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// overLimit is the over-limit cache of the limits with local_cache: a
// budget the store denied with a retry-after R is answered locally, denied,
// until R has passed, for any cost at least the denied one, without a store
// call. It never admits anything, so it cannot over-admit. It can over-deny
// when the budget reopens before R: a refund (settling below the estimate)
// or a reset by another replica, or by this one through a path that does not
// invalidate; this process's own settles and resets invalidate the entries
// they touch. The bound: a request is denied at most R after the denial
// that cached it, where R is what the store reported then.
//
// The denials of callers' own limits (CheckLimit) are kept apart: no
// reservation charges those limits, so no refund reopens them.
type overLimit struct {
	mu      sync.Mutex
	entries map[overKey]overEntry
	own     map[overKey]overEntry
	max     int
}

type overKey struct{ limit, key string }

// overEntry is a cached denial: until when (the local clock), of which cost
// and with what result.
type overEntry struct {
	at, until time.Time
	cost      int64
	result    tokenlimit.Result
}

// overLimitMax bounds the cached denials; past it expired ones are dropped
// and, if none has expired, nothing more is cached.
const overLimitMax = 100_000

func newOverLimit() *overLimit {
	return &overLimit{entries: map[overKey]overEntry{}, own: map[overKey]overEntry{}, max: overLimitMax}
}

// lookup returns c's cached denial at now, if it has one that covers c's
// cost, with RetryAfter and ResetAfter counted down to now.
func (o *overLimit) lookup(c check, now time.Time) (tokenlimit.Result, bool) {
	o.mu.Lock()
	e, ok := o.of(c)[overKey{c.limit.Name, c.item.Key}]
	o.mu.Unlock()
	if !ok || !now.Before(e.until) || c.item.Cost < e.cost {
		return tokenlimit.Result{}, false
	}
	r, past := e.result, now.Sub(e.at)
	r.RetryAfter = max(0, r.RetryAfter-past)
	r.ResetAfter = max(0, r.ResetAfter-past)
	return r, true
}

// record caches the denials among checks' results, decided at now.
func (o *overLimit) record(checks []check, results []tokenlimit.Result, now time.Time) {
	for i, c := range checks {
		r := results[i]
		if !c.limit.LocalCache || r.Allowed || r.CostExceedsLimit || r.RetryAfter <= 0 {
			continue
		}
		o.mu.Lock()
		if len(o.entries)+len(o.own) >= o.max {
			o.sweep(now)
		}
		if len(o.entries)+len(o.own) < o.max {
			o.of(c)[overKey{c.limit.Name, c.item.Key}] = overEntry{at: now, until: now.Add(r.RetryAfter), cost: c.item.Cost, result: r}
		}
		o.mu.Unlock()
	}
}

// forget drops the cached denials of checks: their budgets may have
// reopened.
func (o *overLimit) forget(checks []check) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range checks {
		if c.limit.LocalCache {
			delete(o.of(c), overKey{c.limit.Name, c.item.Key})
		}
	}
}

// of returns the map of c's denials. The caller holds mu.
func (o *overLimit) of(c check) map[overKey]overEntry {
	if c.own {
		return o.own
	}
	return o.entries
}

// forgetRefundable drops every cached denial of a limit that reservations
// charge, which a refund may have reopened.
func (o *overLimit) forgetRefundable() {
	o.mu.Lock()
	defer o.mu.Unlock()
	clear(o.entries)
}

// sweep drops expired entries. The caller holds mu.
func (o *overLimit) sweep(now time.Time) {
	for _, m := range [...]map[overKey]overEntry{o.entries, o.own} {
		for k, e := range m {
			if !now.Before(e.until) {
				delete(m, k)
			}
		}
	}
}

// cachedDenial answers a plan of one enforced limit with local_cache from
// the cache, if it holds a denial that covers it.
func (s *Service) cachedDenial(p plan) (Decision, bool) {
	if len(p.enforced) != 1 || !p.enforced[0].limit.LocalCache {
		return Decision{}, false
	}
	now := s.opts.Clock()
	r, ok := s.overLimit.lookup(p.enforced[0], now)
	if !ok {
		return Decision{}, false
	}
	return Decision{At: now, Limits: outcomes(p.enforced, []tokenlimit.Result{r}, false)}, true
}
