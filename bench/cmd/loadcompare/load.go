package main

import (
	"context"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// keyNames are the keys the load is spread over: user=100000, user=100001...
func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user=" + strconv.Itoa(100000+i)
	}
	return keys
}

// cell is one (variant, callers) measurement.
type cell struct {
	decisions int64
	allowed   int64
	errors    int64
	firstErr  error
	elapsed   time.Duration
	hist      histogram
}

// merge adds o, a later slice of the same cell.
func (c *cell) merge(o cell) {
	c.decisions += o.decisions
	c.allowed += o.allowed
	c.errors += o.errors
	if c.firstErr == nil {
		c.firstErr = o.firstErr
	}
	c.elapsed += o.elapsed
	c.hist.merge(&o.hist)
}

func (c cell) perSecond() float64 {
	if c.elapsed <= 0 {
		return 0
	}
	return float64(c.decisions) / c.elapsed.Seconds()
}

// runLoad runs callers goroutines, each deciding in a loop on keys in a
// scattered order, until d has passed (or ctx ends). The calls share one
// deadline, 5 s past d, so a cell never outlives d by more than that; one
// timer per cell rather than per call keeps the generator's own CPU out of
// what the variants are compared on.
func runLoad(ctx context.Context, decide decider, callers int, d time.Duration, keys []string) cell {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		out  cell
		stop atomic.Bool
	)
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, d+5*time.Second)
	defer cancel()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local cell
			i := (g * 7717) % len(keys)
			for !stop.Load() && ctx.Err() == nil {
				i += 7919
				if i >= len(keys) {
					i %= len(keys)
				}
				t0 := time.Now()
				ok, err := decide(ctx, keys[i])
				local.hist.add(time.Since(t0))
				if err != nil {
					local.errors++
					if local.firstErr == nil {
						local.firstErr = err
					}
					continue
				}
				local.decisions++
				if ok {
					local.allowed++
				}
			}
			mu.Lock()
			out.decisions += local.decisions
			out.allowed += local.allowed
			out.errors += local.errors
			if out.firstErr == nil {
				out.firstErr = local.firstErr
			}
			out.hist.merge(&local.hist)
			mu.Unlock()
		}()
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	return out
}

// histogram counts latencies in log-linear buckets: 8 per power of two of
// nanoseconds, so a quantile is within about 9%.
type histogram struct {
	counts [64 * 8]int64
	n      int64
}

func bucketOf(ns int64) int {
	if ns < 8 {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 1 // 2^e <= ns < 2^(e+1), e >= 3
	m := int(ns>>(e-3)) & 7
	return e*8 + m
}

func bucketValue(b int) time.Duration {
	if b < 8 {
		return time.Duration(b)
	}
	e, m := b/8, b%8
	lo := int64(8+m) << (e - 3)
	hi := int64(8+m+1) << (e - 3)
	return time.Duration((lo + hi) / 2)
}

func (h *histogram) add(d time.Duration) {
	h.counts[bucketOf(int64(d))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the latency below which a fraction q of calls fell.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n-1)) + 1
	var seen int64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			return bucketValue(b)
		}
	}
	return bucketValue(len(h.counts) - 1)
}
