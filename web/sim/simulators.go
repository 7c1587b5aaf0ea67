// Package sim is the dashboard's teaching simulators, run on the real engine
// in sandboxes: the sliding window and the token bucket (each visitor's
// session has its own small in-memory store), the race between a
// client-side GET-then-INCR limiter and the atomic check, and the five
// algorithms side by side on one request pattern. Package web mounts their
// handlers under /ui/api/sim/; they need no service and touch no real
// budget.
package sim

import (
	"errors"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// Defaults of Options.
const (
	DefaultMaxSessions = 1000
	DefaultSessionIdle = 30 * time.Minute
)

// maxBodyBytes caps the bodies of the simulators' endpoints.
const maxBodyBytes = 16 << 10

// Options configures the simulators. The zero value is ready to use.
type Options struct {
	// Clock is the simulators' time. Nil means time.Now.
	Clock func() time.Time
	// MaxSessions bounds the sessions kept at once (each is a small
	// in-memory store); past it the least recently used is dropped. Zero
	// means DefaultMaxSessions.
	MaxSessions int
	// SessionIdle is how long an unused session is kept. Zero means
	// DefaultSessionIdle.
	SessionIdle time.Duration
}

// Simulators serves the simulators' endpoints: Window, Bucket, Race and
// Compare, each a POST with a JSON body. It is safe for concurrent use.
type Simulators struct {
	clock   func() time.Time
	sandbox *sandbox
}

// New returns the simulators. It fails if an option is negative.
func New(o Options) (*Simulators, error) {
	if o.MaxSessions < 0 || o.SessionIdle < 0 {
		return nil, errors.New("sim: New: MaxSessions and SessionIdle must not be negative")
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.SessionIdle == 0 {
		o.SessionIdle = DefaultSessionIdle
	}
	return &Simulators{clock: o.Clock, sandbox: newSandbox(o.Clock, o.SessionIdle, o.MaxSessions)}, nil
}

// BucketLevel is the exact number of tokens in a token bucket or GCRA
// budget, from what the engine answered (false for other algorithms): its capacity less the tokens that
// the time until it is full (ResetAfter) would refill.
func BucketLevel(l tokenlimit.Limit, r tokenlimit.Result) (float64, bool) {
	if l.Algorithm != tokenlimit.TokenBucket && l.Algorithm != tokenlimit.GCRA {
		return 0, false
	}
	// In units of 1/den µs, exact: capacity×num ≤ storekit.MaxBucketSpan.
	num, den := l.Interval() // µs per token = num/den
	left := l.Capacity()*num - r.ResetAfter.Microseconds()*den
	return float64(min(max(left, 0), l.Capacity()*num)) / float64(num), true
}
