package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/tcprelay"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/storetest"
)

// giveUpTally is what one caller of TestCallersThatGiveUpChargeOnlyTheirOwnKeys
// saw: the costs of its calls answered admitted, and of those that returned
// an error (which may or may not have been charged).
type giveUpTally struct {
	admitted, errored int64
}

// Callers with short random deadlines against a Redis whose replies a real
// relay holds 0-5 ms, through the Limiter (whose single-item calls are
// pooled): most give up while their checks are queued or in flight. Every
// key's charge in Redis is then what its own calls charged: at least the
// costs answered admitted, at most those plus the costs of its calls that
// failed; every admitted answer is its own call's (each caller has a quota
// of its own); and no key exists that no caller asked for. A lane that read
// a call's items, or wrote its results, after its caller returned charged
// keys for calls of others (and the zeroed pooled item's key) and answered
// callers with results of other calls.
func TestCallersThatGiveUpChargeOnlyTheirOwnKeys(t *testing.T) {
	srv := redistest.Start(t)
	clients := map[string]func(t *testing.T, addr string) redisstore.Scripter{
		"rueidis":  func(t *testing.T, addr string) redisstore.Scripter { return rueidisclient.New(rueidisClient(t, addr)) },
		"go-redis": func(t *testing.T, addr string) redisstore.Scripter { return goredisclient.New(goRedisClient(t, addr)) },
	}
	for name, dial := range clients {
		t.Run(name, func(t *testing.T) {
			relay, err := tcprelay.Start(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { relay.Close() })
			prefix := newPrefix()
			st := newStore(t, dial(t, relay.Addr()), callerTime(prefix))
			l, err := tokenlimit.NewLimiter(st, tokenlimit.WithClock(func() time.Time { return storetest.Base }))
			if err != nil {
				t.Fatal(err)
			}
			// rueidis dials on the context of the first call and fails
			// every call waiting for that dial with its error: a call with
			// no deadline dials first (TestQueuedChecksOfCallersThatGiveUpAtRandom).
			if _, err := l.AllowN(context.Background(), giveUpKey(0), giveUpLimit(0), 0); err != nil {
				t.Fatal(err)
			}
			const callers, calls = 64, 60
			tallies := make([]giveUpTally, callers)
			var wg sync.WaitGroup
			for c := range callers {
				wg.Go(func() { tallies[c] = giveUp(t, l, relay, c, calls) })
			}
			wg.Wait()
			relay.SetDelay(tcprelay.Replies, 0)
			assertChargedOwnCalls(t, newStore(t, rueidisclient.New(rueidisClient(t, srv.Addr())), callerTime(prefix)), tallies)
			assertOnlyKeysAskedFor(t, srv, st, prefix, callers)
		})
	}
}

// The same for reservations through the Store, whose callers reuse their
// items and results slices from call to call as a pooling caller does: a
// lane that read or wrote them after a caller gave up would race with the
// caller's next call (-race), charge another key or answer another call.
func TestReservationsThatGiveUpChargeOnlyTheirOwnKeys(t *testing.T) {
	srv := redistest.Start(t)
	relay, err := tcprelay.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	prefix := newPrefix()
	st := newStore(t, rueidisclient.New(rueidisClient(t, relay.Addr())), callerTime(prefix))
	// A first call with no deadline dials (see above).
	if _, err := st.Check(context.Background(), storetest.Base, []tokenlimit.Item{{Key: giveUpKey(0), Limit: giveUpLimit(0)}}, make([]tokenlimit.Result, 1)); err != nil {
		t.Fatal(err)
	}
	const callers, calls = 64, 40
	tallies := make([]giveUpTally, callers)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() { tallies[c] = giveUpReserving(t, st, relay, c, calls) })
	}
	wg.Wait()
	relay.SetDelay(tcprelay.Replies, 0)
	assertChargedOwnCalls(t, newStore(t, rueidisclient.New(rueidisClient(t, srv.Addr())), callerTime(prefix)), tallies)
}

// giveUpReserving is giveUp with reservations, made with one items and
// one results slice that the caller rewrites for each call.
func giveUpReserving(t *testing.T, st *redisstore.Store, relay *tcprelay.Relay, c, calls int) giveUpTally {
	var tally giveUpTally
	limit, key := giveUpLimit(c), giveUpKey(c)
	items, results := make([]tokenlimit.Item, 1), make([]tokenlimit.Result, 1)
	for i := range calls {
		cost := 1 + rand.Int64N(5)
		items[0], results[0] = tokenlimit.Item{Key: key, Limit: limit, Cost: cost}, tokenlimit.Result{}
		relay.SetDelay(tcprelay.Replies, rand.N(5*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), giveUpDeadline(i))
		req := tokenlimit.ReserveRequest{ID: tokenlimit.NewID(), Items: items, TTL: time.Hour}
		out, err := st.Reserve(ctx, storetest.Base, req, results)
		cancel()
		if err != nil {
			tally.errored += cost
			continue
		}
		if !out.Status.Admitted() || results[0].Limit != limit.Quota {
			t.Errorf("caller %d, reservation %d: %+v %+v, want an admitted answer of limit %d", c, i, out, results[0], limit.Quota)
			continue
		}
		tally.admitted += cost
	}
	return tally
}

// giveUpLimit is caller c's limit: a quota no call exhausts, its own.
func giveUpLimit(c int) tokenlimit.Limit {
	return tokenlimit.FixedWindowLimit(int64(1_000_000+c), time.Hour)
}

func giveUpKey(c int) string { return fmt.Sprintf("user=%d", c) }

// giveUpDeadline is how long call i waits: 0.2-3 ms, but every fourth a
// second, so that some calls are answered whatever the relay holds (on
// rueidis' one pipelined connection few are within 3 ms).
func giveUpDeadline(i int) time.Duration {
	if i%4 == 3 {
		return time.Second
	}
	return 200*time.Microsecond + rand.N(2800*time.Microsecond)
}

// giveUp makes caller c's calls, each with a random cost of 1-5 and a
// deadline of giveUpDeadline, the relay holding replies 0-5 ms from each
// call on.
func giveUp(t *testing.T, l *tokenlimit.Limiter, relay *tcprelay.Relay, c, calls int) giveUpTally {
	var tally giveUpTally
	limit, key := giveUpLimit(c), giveUpKey(c)
	for i := range calls {
		cost := 1 + rand.Int64N(5)
		relay.SetDelay(tcprelay.Replies, rand.N(5*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), giveUpDeadline(i))
		r, err := l.AllowN(ctx, key, limit, cost)
		cancel()
		if err != nil {
			tally.errored += cost
			continue
		}
		if !r.Allowed || r.Limit != limit.Quota {
			t.Errorf("caller %d, call %d: %+v, want an admitted answer of limit %d", c, i, r, limit.Quota)
			continue
		}
		tally.admitted += cost
	}
	return tally
}

// assertChargedOwnCalls reads every caller's key through st (a store that
// sees the same keys) and holds its charge between what its calls were
// answered admitted and that plus the costs of its calls that failed.
func assertChargedOwnCalls(t *testing.T, st *redisstore.Store, tallies []giveUpTally) {
	t.Helper()
	var admitted, errored int64
	for c, tally := range tallies {
		limit := giveUpLimit(c)
		results := make([]tokenlimit.Result, 1)
		items := []tokenlimit.Item{{Key: giveUpKey(c), Limit: limit}}
		if _, err := st.Check(context.Background(), storetest.Base, items, results); err != nil {
			t.Fatal(err)
		}
		charged := limit.Quota - results[0].Remaining
		if charged < tally.admitted || charged > tally.admitted+tally.errored {
			t.Errorf("caller %d: key charged %d, want %d admitted + 0..%d of failed calls", c, charged, tally.admitted, tally.errored)
		}
		admitted += tally.admitted
		errored += tally.errored
	}
	if admitted == 0 || errored == 0 {
		t.Errorf("%d admitted and %d failed costs: the test needs both (callers that wait and callers that give up)", admitted, errored)
	}
}

// assertOnlyKeysAskedFor fails t if the store's namespace holds a key that
// is not one of the callers' keys.
func assertOnlyKeysAskedFor(t *testing.T, srv *redistest.Server, st *redisstore.Store, prefix string, callers int) {
	t.Helper()
	want := map[string]bool{}
	for c := range callers {
		for _, k := range st.Keys(giveUpKey(c), tokenlimit.FixedWindow) {
			want[k] = true
		}
	}
	reply, err := srv.Do("KEYS", prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range strings.Fields(reply) {
		if !want[k] {
			t.Errorf("key %q exists, which no caller asked for", k)
		}
	}
}
