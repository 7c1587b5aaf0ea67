package resilient

import (
	"sync"
	"time"
)

// This file remembers, for the reservations made through a Stores on this
// replica, which of its stores hold them, so that a settle by id goes to
// those stores alone (Stores.Settle): a reservation of the main store's
// limits alone is settled without a round trip to a home store over a
// slow link. The memory only narrows where a settle goes; it never decides
// an outcome: an id it does not hold (reserved on another replica, settled
// here already, expired, or forgotten early under its bound or after a
// restart) is settled on every store, as it is without the memory, and
// every store applies a settlement once whoever sends it.

// storeSet is a set of a Stores' layers: bit i stands for layers[i].
type storeSet uint64

// maxStores is the most stores a Stores routes to: storeSet's bits.
const maxStores = 64

// storeBit is the set of the layer i alone.
func storeBit(i int) storeSet { return 1 << i }

// has reports whether the layer i is in s.
func (s storeSet) has(i int) bool { return s&storeBit(i) != 0 }

// maxPlacements bounds the ids a placements holds: about 100 bytes each
// with a 36-byte id, so some 10 MB at most. An id is held from its
// reserve until its settle (or its TTL), so this bounds the reservations
// outstanding at once whose settles are narrowed, not their rate.
const maxPlacements = 100_000

// placements maps the ids of reservations made on this replica to the
// stores holding them, each until its reservation's TTL ends or it is
// settled here. It holds at most max ids, in two generations of max/2:
// once the newer is full, the older is dropped, its ids forgotten early.
// It is safe for concurrent use.
type placements struct {
	mu       sync.Mutex
	max      int
	cur, old map[string]placement
}

// placement is where one reservation lives and until when.
type placement struct {
	on      storeSet
	expires time.Time
}

func newPlacements(max int) *placements {
	return &placements{max: max, cur: map[string]placement{}, old: map[string]placement{}}
}

// where returns the stores holding the reservation id at now; known is
// false when it is not held (see the top of this file).
func (p *placements) where(id string, now time.Time) (on storeSet, known bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl, in := p.find(id)
	if in == nil || !now.Before(pl.expires) {
		return 0, false
	}
	return pl.on, true
}

// find returns id's placement and the generation holding it; nil when
// neither does. p.mu is held.
func (p *placements) find(id string) (placement, map[string]placement) {
	if pl, ok := p.cur[id]; ok {
		return pl, p.cur
	}
	if pl, ok := p.old[id]; ok {
		return pl, p.old
	}
	return placement{}, nil
}

// widen adds on to the stores of id, if it is held, before a reserve of
// id reaches them: a settle from then on goes there too.
func (p *placements) widen(id string, on storeSet) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pl, in := p.find(id); in != nil {
		pl.on |= on
		in[id] = pl
	}
}

// add records that the reservation id is held on the stores on (besides
// any it was held on) until expires, at the latest of its expiries.
func (p *placements) add(id string, on storeSet, expires time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl, ok := p.cur[id]
	if !ok {
		pl = p.old[id]
		delete(p.old, id)
	}
	pl.on |= on
	if expires.After(pl.expires) {
		pl.expires = expires
	}
	if !ok && len(p.cur) >= p.max/2 {
		p.old, p.cur = p.cur, make(map[string]placement, len(p.cur))
	}
	p.cur[id] = pl
}

// forget drops id, once settled.
func (p *placements) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.cur, id)
	delete(p.old, id)
}
