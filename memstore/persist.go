package memstore

import (
	"fmt"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// Saved is one budget's state as Export copies it out of the store and
// Import puts it back: its key, algorithm, expiry and the algorithm's
// integers (times in µs since the Unix epoch, so a state read back later
// has aged by the time between).
type Saved struct {
	Key       string
	Algorithm tokenlimit.Algorithm
	Expires   int64 // µs
	State     [3]int64
}

// Export returns the state of at most max budgets that are still live
// more than minLife after now: those worth keeping across a restart (a budget that
// empties sooner loses little by being forgotten). Sliding logs and
// reservations are left out (a log is a list of charges, a reservation
// belongs to a request that a restart ends). Each shard is locked only
// while its budgets are copied, so checks wait for one shard's copy at
// most. It also reports how many budgets it left out for max.
func (s *Store) Export(now time.Time, minLife time.Duration, max int) (saved []Saved, dropped int) {
	after := now.Add(minLife).UnixMicro()
	saved = make([]Saved, 0, min(int(s.keys.Load()), max)) // no copying of a growing slice under a lock
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, head := range sh.entries {
			for e := head; e != nil; e = e.next {
				switch {
				case e.alg == tokenlimit.SlidingLog || e.expires <= after:
				case len(saved) >= max:
					dropped++
				default:
					saved = append(saved, Saved{Key: e.key, Algorithm: e.alg, Expires: e.expires, State: e.s})
				}
			}
		}
		sh.mu.Unlock()
	}
	return saved, dropped
}

// Import puts saved budgets back into the store at now, as Export returned
// them: each one replaces the key's state unless the store has already
// charged that key (a budget live since the start wins over its older
// copy). Budgets expired by now are skipped. It returns how many it put
// back, and fails on an invalid budget or when the store is full (those
// before it stay).
func (s *Store) Import(now time.Time, saved []Saved) (int, error) {
	t, err := micros(now)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range saved {
		if b.Expires <= t {
			continue
		}
		if b.Algorithm == tokenlimit.SlidingLog {
			return n, fmt.Errorf("memstore: import %q: a sliding log cannot be imported", b.Key)
		}
		if err := storekit.ValidateKey(b.Key, b.Algorithm); err != nil {
			return n, fmt.Errorf("memstore: import: %w", err)
		}
		added, err := s.importOne(b, t)
		if err != nil {
			return n, err
		}
		if added {
			n++
		}
	}
	return n, nil
}

// importOne puts b back unless its key is live: it reports whether it did.
func (s *Store) importOne(b Saved, now int64) (bool, error) {
	h := s.keyHash(b.Key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s.sweepDue(sh, now)
	if sh.lookup(h, b.Algorithm, b.Key) != nil {
		return false, nil
	}
	if err := s.reserveKeys(1); err != nil {
		return false, err
	}
	e := s.create(h, b.Algorithm, b.Key)
	e.s, e.expires = b.State, b.Expires
	return true, nil
}
