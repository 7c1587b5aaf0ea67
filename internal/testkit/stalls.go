package testkit

import (
	"sync/atomic"
	"testing"
	"time"
)

// Stalls measures how long this process was kept from running its
// goroutines on time, for tests that bound a wall-clock duration: on a
// machine shared with other work (CPU burners, -race, other processes) a
// goroutine that is ready may wait tens or hundreds of milliseconds before
// it runs, and a bound of the form "within d" can only hold for the time
// the process could run. A probe goroutine wakes every stallPeriod; a wake
// that comes more than a period late adds its lateness to the total. A
// wait on something else (a lock, a socket, a timer of the code under
// test) is no stall: the probe runs meanwhile. It is safe for concurrent
// use.
type Stalls struct {
	total atomic.Int64                  // nanoseconds stalled so far
	tick  atomic.Pointer[chan struct{}] // closed at the probe's next wake
}

// stallPeriod is how often the probe wakes: a stall shorter than a period
// is not counted.
const stallPeriod = time.Millisecond

// StartStalls starts a probe, which tb's cleanup stops.
func StartStalls(tb testing.TB) *Stalls {
	s := &Stalls{}
	next := make(chan struct{})
	s.tick.Store(&next)
	stop, done := make(chan struct{}), make(chan struct{})
	tb.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		t := time.NewTicker(stallPeriod)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			now := time.Now()
			if late := now.Sub(last) - stallPeriod; late > stallPeriod {
				s.total.Add(int64(late))
			}
			last = now
			next := make(chan struct{})
			close(*s.tick.Swap(&next))
		}
	}()
	return s
}

// Total returns the time stalled since the probe started, up to its next
// wake after the call (so that a stall under way is counted).
func (s *Stalls) Total() time.Duration {
	<-*s.tick.Load()
	return time.Duration(s.total.Load())
}
