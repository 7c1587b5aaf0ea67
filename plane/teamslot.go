package plane

import "sync/atomic"

// teamSlot holds the cached team of one name, or nil while there is none,
// for the keys that name it: a decision with a key reads its team through
// its slot, with no lookup by name (at 100,000 keys a lookup in a sync.Map
// cost about 0.8 µs a decision: planeload in bench). The plane stores
// teams in it as they change; keys holds how many cached keys point to
// it. A slot lives while its team is cached or a key names it.
type teamSlot struct {
	team atomic.Pointer[Team]
	keys int // guarded by Plane.mu
}

// slot returns the slot of the team named id, making one if there is
// none. Called with p.mu held.
func (p *Plane) slot(id string) *teamSlot {
	s := p.slots[id]
	if s == nil {
		s = &teamSlot{}
		p.slots[id] = s
	}
	return s
}

// holdSlot points k, about to be cached, to its team's slot. Called with
// p.mu held.
func (p *Plane) holdSlot(k *Key) {
	if k.Team != "" {
		k.slot = p.slot(k.Team)
		k.slot.keys++
	}
}

// releaseSlot counts k, no longer cached, out of its team's slot. Called
// with p.mu held.
func (p *Plane) releaseSlot(k *Key) {
	if k.slot != nil {
		k.slot.keys--
		p.dropIdleSlot(k.Team)
	}
}

// dropIdleSlot forgets the slot of the team named id if no team of that
// name is cached and no cached key names it. Called with p.mu held.
func (p *Plane) dropIdleSlot(id string) {
	if s := p.slots[id]; s != nil && s.keys == 0 && s.team.Load() == nil {
		delete(p.slots, id)
	}
}
