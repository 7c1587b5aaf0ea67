package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestPercentFor(t *testing.T) {
	for _, c := range []struct {
		floor, live uint64
		base, want  int
	}{
		{64 << 20, 4 << 20, 100, 1500}, // 4 MiB live grows to 64 MiB
		{64 << 20, 1 << 20, 100, 1500}, // less counts as the runtime's 4 MiB minimum
		{64 << 20, 0, 100, 1500},
		{64 << 20, 32 << 20, 100, 100}, // GOGC=100 reaches the floor by itself
		{64 << 20, 40 << 20, 100, 100}, // and beyond it
		{64 << 20, 16 << 20, 400, 400}, // a larger GOGC stands
		{64 << 20, 100 << 20, 50, 50},  // a smaller GOGC stands above the floor
		{64 << 20, 20 << 20, 50, 220},  // and is raised below it
		{1 << 20, 64 << 20, 100, 100},  // floor below live
		{1 << 40, 4 << 20, 100, maxPercent},
	} {
		if got := percentFor(c.floor, c.live, c.base); got != c.want {
			t.Errorf("percentFor(%d, %d, %d) = %d, want %d", c.floor, c.live, c.base, got, c.want)
		}
	}
}

// TestStartStop: with a floor far above this test's live heap the
// percentage is raised, after each collection too, and Stop restores it.
func TestStartStop(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	f := Start(1 << 40)
	if p, g := f.read(); p <= 100 || g != p {
		t.Fatalf("after Start: Percent %d, GOGC %d; want both above 100 and equal", p, g)
	}
	for range 3 {
		runtime.GC()
		if p, g := f.read(); p <= 100 || g != p {
			t.Fatalf("after a collection: Percent %d, GOGC %d; want both above 100 and equal", p, g)
		}
	}
	f.Stop()
	if p, g := f.read(); p != 100 || g != 100 {
		t.Fatalf("after Stop: Percent %d, GOGC %d; want 100", p, g)
	}
	runtime.GC()
	runtime.GC() // a finalizer queued before Stop must not raise it again
	if _, g := f.read(); g != 100 {
		t.Fatalf("after Stop and a collection: GOGC %d, want 100", g)
	}
}

// read returns Percent and the collector's percentage, read together.
func (f *Floor) read() (percent, gc int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Percent(), gogc()
}

// TestOff: with the collector off, Start leaves it off.
func TestOff(t *testing.T) {
	base := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(base)
	f := Start(64 << 20)
	defer f.Stop()
	if gogc() != -1 {
		t.Fatalf("GOGC %d, want off", gogc())
	}
}

func gogc() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}
