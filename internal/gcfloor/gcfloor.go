// Package gcfloor keeps a process whose live heap is small from collecting
// garbage many times a second. The Go runtime starts a collection once the
// heap has grown by GOGC percent of the live heap (100% by default, with a
// 4 MiB minimum), so a service that keeps a few MiB live but allocates tens
// of MiB a second collects tens of times a second, and pays for each
// cycle's fixed work (scanning every goroutine's stack, shrinking and then
// regrowing idle goroutines' stacks) again and again.
//
// Start raises the collector's percentage after each collection so that
// the next one waits until the heap reaches a floor, and leaves it at the
// configured GOGC once the live heap is large enough for that to reach the
// floor by itself: the heap grows to at most max(floor, live × (1 + GOGC
// / 100)) between collections. GOMEMLIMIT, when set, still bounds it.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Floor adjusts the collector's percentage after each collection. Its
// methods are safe for concurrent use.
type Floor struct {
	floor   uint64 // bytes
	base    int    // the percentage configured when it started
	stopped atomic.Bool
	mu      sync.Mutex // serializes setting the percentage with Stop
	percent atomic.Int64
}

// liveMetric is the heap the last collection found live, in bytes.
const liveMetric = "/gc/heap/live:bytes"

// maxPercent bounds the percentage Start sets.
const maxPercent = 10_000

// Start makes the collector wait, after each collection, until the heap
// reaches floor bytes, unless the configured GOGC already lets it grow that
// far; it does nothing while the collector is off (GOGC=off). Stop undoes
// it. A floor of 0 does nothing. The percentage is the process's: run one
// Floor at a time.
func Start(floor uint64) *Floor {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	f := &Floor{floor: floor, base: base}
	f.percent.Store(int64(base))
	if floor == 0 || base < 0 {
		f.stopped.Store(true)
		return f
	}
	f.tune()
	f.arm()
	return f
}

// Percent is the collector's percentage Floor last set.
func (f *Floor) Percent() int { return int(f.percent.Load()) }

// Stop restores the configured percentage and stops adjusting it.
func (f *Floor) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped.Swap(true) {
		return
	}
	debug.SetGCPercent(f.base)
	f.percent.Store(int64(f.base))
}

// sentinel is garbage whose finalizer runs once per collection: it tunes
// the percentage and makes the next sentinel.
type sentinel struct{ f *Floor }

func (f *Floor) arm() {
	runtime.SetFinalizer(&sentinel{f: f}, func(s *sentinel) {
		if !s.f.stopped.Load() {
			s.f.tune()
			s.f.arm()
		}
	})
}

// tune sets the percentage for the live heap the last collection found.
func (f *Floor) tune() {
	sample := []metrics.Sample{{Name: liveMetric}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	p := percentFor(f.floor, sample[0].Value.Uint64(), f.base)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped.Load() || int64(p) == f.percent.Load() {
		return
	}
	debug.SetGCPercent(p)
	f.percent.Store(int64(p))
}

// minHeap is the Go runtime's minimum heap goal at GOGC=100, which it
// scales with the percentage: a live heap smaller than it counts as this
// large, or the scaled minimum would overshoot the floor.
const minHeap = 4 << 20

// percentFor is the percentage that lets a heap of live bytes grow to
// floor before the next collection, and at least base.
func percentFor(floor, live uint64, base int) int {
	live = max(live, minHeap)
	if floor <= live {
		return base
	}
	p := (floor - live) * 100 / live
	return int(max(uint64(base), min(p, maxPercent)))
}
