package resilient

import (
	"strconv"
	"testing"
	"time"
)

// TestPlacementsBoundAndTTL: an id is known until its TTL ends, widened
// only while known, forgotten once settled, and the memory never holds
// more than its bound (the oldest generation is dropped).
func TestPlacementsBoundAndTTL(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	p := newPlacements(4)
	p.add("a", storeBit(0), t0.Add(time.Minute))
	p.widen("a", storeBit(2))
	p.widen("unknown", storeBit(1))
	if on, ok := p.where("a", t0); !ok || on != storeBit(0)|storeBit(2) {
		t.Fatalf("a: %b %v; want stores 0 and 2", on, ok)
	}
	if _, ok := p.where("unknown", t0); ok {
		t.Fatal("an id never added is known after widen")
	}
	if _, ok := p.where("a", t0.Add(time.Minute)); ok {
		t.Fatal("a is known at its TTL's end")
	}
	p.forget("a")
	if _, ok := p.where("a", t0); ok {
		t.Fatal("a is known once forgotten")
	}
	for i := range 10 {
		p.add(strconv.Itoa(i), storeBit(1), t0.Add(time.Minute))
		if n := len(p.cur) + len(p.old); n > 4 {
			t.Fatalf("after %d adds: %d ids held, want at most 4", i+1, n)
		}
	}
	// The last two are held; a re-added older one keeps its stores.
	for _, id := range []string{"8", "9"} {
		if _, ok := p.where(id, t0); !ok {
			t.Errorf("%s, among the newest, is not known", id)
		}
	}
	p.add("9", storeBit(0), t0.Add(time.Hour))
	if on, ok := p.where("9", t0.Add(30*time.Minute)); !ok || on != storeBit(0)|storeBit(1) {
		t.Errorf("9 re-added: %b %v; want stores 0 and 1, until the later TTL", on, ok)
	}
}
