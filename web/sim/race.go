package sim

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// raceBody is the body of /ui/api/sim/race.
type raceBody struct {
	// Requests are sent alternately by the two replicas, A and B.
	Requests int `json:"requests"`
	// Limit is the budget: Limit requests per minute (a fixed window, the
	// classic per-minute counter).
	Limit int64 `json:"limit"`
	// InFlight is how many requests each replica has in flight at once:
	// the requests go in waves of 2×InFlight.
	InFlight int `json:"in_flight"`
}

// raceAnswer compares the two ways of checking the same traffic.
type raceAnswer struct {
	Requests int   `json:"requests"`
	Limit    int64 `json:"limit"`
	InFlight int   `json:"in_flight"`
	// Naive is client-side GET then INCR: each request reads the budget,
	// and if it saw room, charges it with an unconditional increment.
	Naive raceRun `json:"naive"`
	// Atomic is one atomic check per request (the Lua script on Redis).
	Atomic raceRun `json:"atomic"`
}

type raceRun struct {
	Admitted int          `json:"admitted"`
	Requests []raceResult `json:"requests"`
}

// raceResult is one request: which replica sent it, in which wave, the
// budget it saw (naive: what its GET read; atomic: what was left after its
// check) and whether it was admitted.
type raceResult struct {
	Replica string `json:"replica"`
	Wave    int    `json:"wave"`
	Saw     int64  `json:"saw"`
	Allowed bool   `json:"allowed"`
}

// Race serves POST /ui/api/sim/race. Both runs use a fresh in-memory
// store shared by two Limiters (the two gateway replicas) and a clock
// stopped at the start, so that they see the same window. Within a wave
// every request runs in its own goroutine; in the naive run a barrier
// holds every write until every read of the wave is done, which is the
// interleaving that concurrent replicas produce when their GETs cross; in
// the atomic run the same goroutines check at once, and the store admits
// exactly the limit whatever the interleaving.
func (sm *Simulators) Race(w http.ResponseWriter, r *http.Request) {
	b := raceBody{Requests: 20, Limit: 10, InFlight: 4}
	if err := httpx.DecodeOptional(w, r, maxBodyBytes, &b); err != nil {
		httpx.Fail(w, err)
		return
	}
	for _, c := range []struct {
		field  string
		v, max int64
	}{{"requests", int64(b.Requests), 200}, {"limit", b.Limit, 200}, {"in_flight", int64(b.InFlight), 100}} {
		if err := checkRange(c.field, c.v, 1, c.max); err != nil {
			httpx.Fail(w, err)
			return
		}
	}
	ans, err := race(r.Context(), b, sm.clock())
	if err != nil {
		httpx.Fail(w, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, ans)
}

// race runs b's traffic both ways at the stopped time now.
func race(ctx context.Context, b raceBody, now time.Time) (raceAnswer, error) {
	store, err := memstore.New(memstore.Options{Shards: 1, MaxKeys: 4})
	if err != nil {
		return raceAnswer{}, err
	}
	var replicas [2]*tokenlimit.Limiter
	for i := range replicas {
		if replicas[i], err = tokenlimit.NewLimiter(store, tokenlimit.WithClock(func() time.Time { return now })); err != nil {
			return raceAnswer{}, err
		}
	}
	lim := tokenlimit.FixedWindowLimit(b.Limit, time.Minute)
	ans := raceAnswer{Requests: b.Requests, Limit: b.Limit, InFlight: b.InFlight}
	naive := racer{
		// GET: read the budget without charging; admit if it has room.
		read: func(ctx context.Context, i int, key string) (raceResult, error) {
			res, err := replicas[i%2].AllowN(ctx, key, lim, 0)
			return raceResult{Saw: res.Remaining, Allowed: res.Remaining >= 1}, err
		},
		// INCR: charge 1, unconditionally, whatever the budget holds now.
		write: func(ctx context.Context, key string) error {
			return store.Adjust(ctx, now, []tokenlimit.Adjustment{{Key: key, Limit: lim, Delta: 1, ChargedAt: now}})
		},
	}
	atomic := racer{
		read: func(ctx context.Context, i int, key string) (raceResult, error) {
			res, err := replicas[i%2].Allow(ctx, key, lim)
			return raceResult{Saw: res.Remaining, Allowed: res.Allowed}, err
		},
	}
	if ans.Naive, err = naive.run(ctx, b, "naive"); err != nil {
		return raceAnswer{}, err
	}
	if ans.Atomic, err = atomic.run(ctx, b, "atomic"); err != nil {
		return raceAnswer{}, err
	}
	return ans, nil
}

// racer is one way of deciding a request: read, then, if the read admitted
// it and write is not nil, write.
type racer struct {
	read  func(ctx context.Context, i int, key string) (raceResult, error)
	write func(ctx context.Context, key string) error
}

// run sends b.Requests requests on key, request i from replica i%2, in
// waves of 2×InFlight goroutines released together. Within a wave every
// read ends before any write starts.
func (rc racer) run(ctx context.Context, b raceBody, key string) (raceRun, error) {
	run := raceRun{Requests: make([]raceResult, b.Requests)}
	size := 2 * b.InFlight
	for start, wave := 0, 1; start < b.Requests; start, wave = start+size, wave+1 {
		end := min(start+size, b.Requests)
		err := together(start, end, func(i int) (err error) {
			run.Requests[i], err = rc.read(ctx, i, key)
			run.Requests[i].Replica, run.Requests[i].Wave = string(rune('A'+i%2)), wave
			return err
		})
		if err == nil && rc.write != nil { // the barrier: every read of the wave is done
			err = together(start, end, func(i int) error {
				if !run.Requests[i].Allowed {
					return nil
				}
				return rc.write(ctx, key)
			})
		}
		if err != nil {
			return raceRun{}, err
		}
	}
	for _, r := range run.Requests {
		if r.Allowed {
			run.Admitted++
		}
	}
	return run, nil
}

// together runs f(i) for i in [start, end), each in its own goroutine,
// released at once, and returns the first error when all are done.
func together(start, end int, f func(i int) error) error {
	var wg sync.WaitGroup
	gate := make(chan struct{})
	errs := make([]error, end-start)
	for i := start; i < end; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			errs[i-start] = f(i)
		}()
	}
	close(gate)
	wg.Wait()
	return errors.Join(errs...)
}
