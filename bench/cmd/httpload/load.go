package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// caller makes one decision call for user i and reports whether it was
// allowed; err is a transport error or an unexpected answer.
type caller func(ctx context.Context, i int) (allowed bool, err error)

// factory returns the caller one goroutine uses, and its cleanup: clients
// safe for concurrent use share one caller, a raw HTTP connection is one
// goroutine's own.
type factory func() (caller, func())

// tally is what one phase of load measured.
type tally struct {
	calls, allowed, errors int
	firstErr               error
	elapsed                time.Duration
	lat                    []time.Duration // per call; open loop: from the scheduled send time
	service                []time.Duration // open loop only: from the actual send time
	pacerLag               []time.Duration // open loop only: how late the pacer queued each call
	rate                   float64         // open loop only: the scheduled rate
}

func (t *tally) add(o *tally) {
	t.calls += o.calls
	t.allowed += o.allowed
	t.errors += o.errors
	if t.firstErr == nil {
		t.firstErr = o.firstErr
	}
	t.lat = append(t.lat, o.lat...)
	t.service = append(t.service, o.service...)
}

func (t *tally) record(allowed bool, err error) {
	t.calls++
	switch {
	case err != nil:
		t.errors++
		if t.firstErr == nil {
			t.firstErr = err
		}
	case allowed:
		t.allowed++
	}
}

// perSecond is the rate of completed calls.
func (t *tally) perSecond() float64 {
	if t.elapsed <= 0 {
		return 0
	}
	return float64(t.calls) / t.elapsed.Seconds()
}

// quantile returns the q-quantile of d (sorted in place), 0 when empty.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	if !slices.IsSorted(d) {
		slices.Sort(d)
	}
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

// warm calls every user once, from 16 goroutines, so that every key exists
// before anything is measured.
func warm(ctx context.Context, newCaller factory, users int) *tally {
	var next atomic.Int64
	var mu sync.Mutex
	total := &tally{}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			call, done := newCaller()
			defer done()
			var t tally
			for i := int(next.Add(1)) - 1; i < users && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				t.record(call(ctx, i))
			}
			mu.Lock()
			total.add(&t)
			mu.Unlock()
		})
	}
	wg.Wait()
	return total
}

// closedLoop runs n callers for d, each sending its next call as soon as the
// previous one answered, on users that walk from a different start per
// caller: the throughput of n keep-alive clients.
func closedLoop(ctx context.Context, newCaller factory, n, users int, d time.Duration) *tally {
	var mu sync.Mutex
	total := &tally{}
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for c := range n {
		wg.Go(func() {
			call, done := newCaller()
			defer done()
			t := tally{lat: make([]time.Duration, 0, 1024)}
			for i := c * 7919; ctx.Err() == nil; i++ {
				s := time.Now()
				if !s.Before(deadline) {
					break
				}
				allowed, err := call(ctx, i%users)
				t.lat = append(t.lat, time.Since(s))
				t.record(allowed, err)
			}
			mu.Lock()
			total.add(&t)
			mu.Unlock()
		})
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	return total
}

// openLoop sends calls at a constant rate for d, whatever the answers do:
// call k is due at start + k/rate. A pacer hands each call, with its due
// time, to a pool of workers through a queue that never blocks it; a call
// that finds every worker busy waits in the queue. Each call's latency is
// measured from its due time (so that a stall delays, and counts against,
// every call scheduled during it, instead of silently sending fewer: no
// coordinated omission), and separately from when it was actually sent.
func openLoop(ctx context.Context, newCaller factory, rate float64, d time.Duration, workers, users int) *tally {
	type due struct {
		at time.Time
		i  int
	}
	interval := time.Duration(float64(time.Second) / rate)
	total := int(d / interval)
	queue := make(chan due, total)
	var mu sync.Mutex
	sum := &tally{rate: rate}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			call, done := newCaller()
			defer done()
			t := tally{lat: make([]time.Duration, 0, total/workers+16), service: make([]time.Duration, 0, total/workers+16)}
			for c := range queue {
				sent := time.Now()
				allowed, err := call(ctx, c.i%users)
				end := time.Now()
				t.lat = append(t.lat, end.Sub(c.at))
				t.service = append(t.service, end.Sub(sent))
				t.record(allowed, err)
			}
			mu.Lock()
			sum.add(&t)
			mu.Unlock()
		})
	}
	start := time.Now().Add(time.Millisecond)
	lag := pace(ctx, start, interval, total, func(k int, at time.Time) { queue <- due{at: at, i: k} })
	close(queue)
	wg.Wait()
	sum.elapsed = time.Since(start)
	sum.pacerLag = lag
	return sum
}

// pace calls send(k, at) for k in [0, total) at at = start + k*interval,
// from one goroutine on its own OS thread that sleeps with nanosleep(2), and
// returns how late each send was. A late pacer catches up at once: calls
// are never dropped, they go out late (and are timed from at).
func pace(ctx context.Context, start time.Time, interval time.Duration, total int, send func(k int, at time.Time)) []time.Duration {
	lag := make([]time.Duration, 0, total)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer lockPacerThread()()
		for k := 0; k < total && ctx.Err() == nil; k++ {
			at := start.Add(time.Duration(k) * interval)
			if wait := time.Until(at); wait > 0 {
				sleepPrecise(wait)
			}
			send(k, at)
			lag = append(lag, time.Since(at))
		}
	}()
	<-done
	return lag
}

// wakeLag measures the machine itself: how late a thread that sleeps until
// each of rate deadlines per second for d wakes up, with no other load from
// this tool. No call can be timed better than this from a schedule.
func wakeLag(ctx context.Context, rate float64, d time.Duration) []time.Duration {
	interval := time.Duration(float64(time.Second) / rate)
	return pace(ctx, time.Now().Add(time.Millisecond), interval, int(d/interval), func(int, time.Time) {})
}
