package resilient

// LeasesIdle reports whether f's leases are at rest: no take or return in
// flight, and no lease still held past its end (its timer about to run).
// A test waits for it before it reads the store.
func LeasesIdle(f *Failover) bool {
	ls := f.leases
	if ls == nil {
		return true
	}
	if ls.busy.Load() != 0 {
		return false
	}
	now := f.clock()
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.RLock()
		for _, h := range sh.m {
			h.mu.Lock()
			taking := h.taking != nil
			expired := false
			for _, l := range h.leases {
				expired = expired || !now.Before(l.expires)
			}
			h.mu.Unlock()
			if taking || expired {
				sh.mu.RUnlock()
				return false
			}
		}
		sh.mu.RUnlock()
	}
	return ls.busy.Load() == 0
}

// LeasesHeldWalked is what f's holders list now, by limit name, found by
// walking them (Outstanding, Leased and Unused only): what the totals
// kept as leases change must equal.
func LeasesHeldWalked(f *Failover) map[string]LeaseStats {
	out := map[string]LeaseStats{}
	if f.leases == nil {
		return out
	}
	for i := range f.leases.shards {
		sh := &f.leases.shards[i]
		sh.mu.RLock()
		for _, h := range sh.m {
			h.mu.Lock()
			for _, l := range h.leases {
				s := out[l.name]
				s.Outstanding++
				s.Leased += l.size
				s.Unused += l.unused()
				out[l.name] = s
			}
			h.mu.Unlock()
		}
		sh.mu.RUnlock()
	}
	return out
}
