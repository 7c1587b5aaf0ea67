package service

import (
	"math"
	"sync"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
)

// This file bounds the key cardinality of a limit with max_keys: past that
// many live keys, requests with a new key value are counted against one
// overflow budget of the limit instead of a budget of their own. The live
// keys are tracked by this process, so the bound is per replica.

// overflowKey is the key of a limit's overflow budget. Budget keys are
// "<name>|<dim>=<value>|...", so a segment without '=' cannot come from a
// descriptor value.
func overflowKey(name, suffix string) string {
	return name + "|overflow" + suffix
}

// keyBound tracks the live keys of one limit. A key counts as live from the
// request that used it until life after the last one (liveFor): by then its
// budget is whole again and the store has let it go.
type keyBound struct {
	mu   sync.Mutex
	max  int
	live map[string]int64 // key -> µs (service clock) until which it is live
	// nextSweep: no entry expires before it, so a full table is swept only
	// when a sweep can free something.
	nextSweep int64
}

func newKeyBound(max int) *keyBound {
	return &keyBound{max: max, live: make(map[string]int64), nextSweep: math.MaxInt64}
}

// admit reports whether key has, or gets, a place among the live keys at
// now (µs). When take is false (inspection, reset) it records nothing and
// reports whether a request would get one.
func (b *keyBound) admit(key string, now, life int64, take bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	until, known := b.live[key]
	if known && until > now {
		if take && now+life > until {
			b.live[key] = now + life
		}
		return true
	}
	if !known && len(b.live) >= b.max && now >= b.nextSweep {
		b.sweep(now)
	}
	if !known && len(b.live) >= b.max {
		return false
	}
	if take {
		b.live[key] = now + life
		b.nextSweep = min(b.nextSweep, now+life)
	}
	return true
}

// sweep drops the keys no longer live at now.
func (b *keyBound) sweep(now int64) {
	next := int64(math.MaxInt64)
	for k, until := range b.live {
		if until <= now {
			delete(b.live, k)
			continue
		}
		next = min(next, until)
	}
	b.nextSweep = next
}

// resize sets the bound (a reload changed max_keys); keys already live keep
// their place until they expire.
func (b *keyBound) resize(max int) {
	b.mu.Lock()
	b.max = max
	b.mu.Unlock()
}

// keyBounds builds the trackers of cfg's limits with max_keys, keeping the
// trackers of old (the configuration before a reload) for limits of the
// same name, so that a reload does not forget the live keys.
func keyBounds(cfg *config.Config, old map[string]*keyBound) map[string]*keyBound {
	out := map[string]*keyBound{}
	for _, l := range cfg.Limits {
		if l.MaxKeys == 0 {
			continue
		}
		if b, ok := old[l.Name]; ok {
			b.resize(l.MaxKeys)
			out[l.Name] = b
			continue
		}
		out[l.Name] = newKeyBound(l.MaxKeys)
	}
	return out
}

// liveFor is how long after a charge a budget of l can still hold some of
// it: the time it takes from empty to whole (PolicyOf), twice the window for
// a sliding counter, which remembers the previous window.
func liveFor(l tokenlimit.Limit) time.Duration {
	if l.Algorithm == tokenlimit.SlidingCounter {
		return 2 * l.Period
	}
	return PolicyOf(l).Window
}

// boundKey returns the key a request uses under l: key itself while the
// limit has room for it, else the limit's overflow budget (counted in
// tokenlimit_key_overflow_total when take).
func (s *Service) boundKey(rules *ruleset, l *config.Limit, key, suffix string, limit tokenlimit.Limit, now time.Time, take bool) string {
	b := rules.bounds[l.Name]
	if b == nil || b.admit(key+suffix, now.UnixMicro(), liveFor(limit).Microseconds(), take) {
		return key + suffix
	}
	if take {
		s.metrics.keyOverflow.WithLabelValues(l.Name).Inc()
	}
	return overflowKey(l.Name, suffix)
}

// keySpaceFull is the decision on checks that a store (which: "store" for
// the service's store, "local" for the fail-open budget) refused because it
// holds as many keys as it may: denied, whatever the limits' failure modes,
// and nothing charged; budgets already stored are untouched.
func (s *Service) keySpaceFull(checks []check, which string) Decision {
	s.metrics.keySpaceFull.WithLabelValues(which).Inc()
	d := Decision{At: s.opts.Clock(), KeySpaceFull: true}
	for _, c := range checks {
		d.Limits = append(d.Limits, c.outcome(tokenlimit.Result{Limit: c.item.Limit.Capacity()}))
	}
	return d
}
