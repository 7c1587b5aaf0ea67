package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/tcprelay"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// The fault tests below run real `serve` processes (in-process, through
// Run) against one real redis-server, each replica reaching it through its
// own real TCP relay (internal/tcprelay), and talk to them over HTTP. A
// reply that is late is a relay holding Redis' replies: the command reached
// Redis and was applied, and the replica's store call times out. The
// budgets are read through the admin inspect API of a replica whose path to
// Redis is fast, so every number asserted is Redis' own count.
//
// The budget is a token bucket of 1000 refilling one token a day, so no
// token comes back while a test runs; each test reserves 100 and settles at
// 60 (a refund of 40).

const faultConfig = `limits:
  - name: tokens
    key: [user]
    algorithm: token_bucket
    capacity: 1000
    refill: 1/d
    cost: request
    fail_open_share: 0.5
`

// faultStoreTimeout is serve's --store-timeout in these tests: long enough
// for a command to reach Redis on a loaded machine; replies are held, not
// delayed by a duration, so it is never raced.
const faultStoreTimeout = "1s"

// replica is one `serve` reaching Redis through its own relay.
type replica struct {
	name  string
	base  string // http://host:port
	relay *tcprelay.Relay
	logs  *lineLog
}

// faultRig is a redis-server and replicas of serve on it.
type faultRig struct {
	t     *testing.T
	redis *redistest.Server
}

func newFaultRig(t *testing.T) *faultRig {
	t.Helper()
	return &faultRig{t: t, redis: redistest.Start(t)}
}

// replica starts a `serve` named name reaching Redis through a new relay.
func (g *faultRig) replica(name string) *replica {
	t := g.t
	t.Helper()
	relay, err := tcprelay.Start(g.redis.Addr())
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(cfg, []byte(faultConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := newSyncBuffer()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--grpc-listen", "",
			"--redis", "redis://" + relay.Addr(), "--store-timeout", faultStoreTimeout, "--reload-every", "0",
			"--admin-token", "secret"}, logs.w, io.Discard)
		logs.w.Close()
	}()
	r := &replica{name: name, base: "http://" + logs.addr(t, "serving HTTP"), relay: relay, logs: keepLines(logs)}
	r.warm(t)
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("replica %s: serve returned %v", name, err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("replica %s did not shut down", name)
		}
		relay.Close()
		if t.Failed() {
			t.Logf("replica %s log:\n%s", name, r.logs)
		}
	})
	return r
}

// warm has Redis load the reserve and settle scripts (a first EVALSHA is
// answered NOSCRIPT, and the script is sent again), so that a held reply
// later is the reply of the command itself.
func (r *replica) warm(t *testing.T) {
	t.Helper()
	id := "warm-" + r.name
	testkit.Eventually(t, 20*time.Second, r.name+" reserving on Redis", func() bool {
		a := r.reserve(t, id, "warm", 1)
		return a.code == http.StatusOK && len(a.body.Limits) == 1 && !a.body.Limits[0].FailOpen
	})
	if s := r.settleUntilAnswered(t, id, 1); s.code != http.StatusOK {
		t.Fatalf("%s: warming settle: %s", r.name, s)
	}
}

// rueidisWires is how many connections serve's Redis client (rueidis
// v1.0.79, on a single server) holds, as observed: two that calls are
// pipelined over (each call takes one at random, and one whose call timed
// out is closed and dialed again when next taken), and the one the quota
// plane follows its writes on (a blocking XREAD, redialed a second after
// it fails).
const rueidisWires = 3

// connectAll resets the replica's connections to Redis and makes calls
// until the client has dialed all of them again, so that a call made while
// replies are held goes out at once, rather than wait behind a connection's
// handshake (whose reply would be held too, so that it never reaches Redis).
func (r *replica) connectAll(t *testing.T) {
	t.Helper()
	r.relay.Reset()
	testkit.Eventually(t, 20*time.Second, fmt.Sprintf("%s's %d connections to Redis open", r.name, rueidisWires), func() bool {
		_, ok := r.left(t, "connect")
		return ok && r.relay.Conns() == rueidisWires
	})
}

// lineLog keeps a server's log lines after its address was read, so that
// the server never blocks on a full pipe.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func keepLines(b *syncBuffer) *lineLog {
	l := &lineLog{}
	go func() {
		for line := range b.lines {
			l.mu.Lock()
			l.lines = append(l.lines, line)
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// reserveAnswer is what /v1/reserve answered.
type reserveAnswer struct {
	code int
	body struct {
		Allowed       bool
		ReservationID string `json:"reservation_id"`
		Limits        []struct {
			Name      string
			FailOpen  bool `json:"fail_open"`
			Remaining int64
		}
	}
}

func (r *replica) post(t *testing.T, path, body string, into any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.name, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", r.name, path, err)
	}
	if into != nil {
		if err := json.Unmarshal(raw, into); err != nil {
			t.Fatalf("%s %s: %s %q: %v", r.name, path, resp.Status, raw, err)
		}
	}
	return resp.StatusCode
}

func (r *replica) reserve(t *testing.T, id, user string, cost int64) reserveAnswer {
	t.Helper()
	var a reserveAnswer
	a.code = r.post(t, "/v1/reserve", fmt.Sprintf(`{"id":%q,"descriptors":{"user":%q},"cost":%d}`, id, user, cost), &a.body)
	return a
}

// settleAnswer is what /v1/settle answered.
type settleAnswer struct {
	code    int
	settled bool
	already bool
}

func (a settleAnswer) String() string {
	return fmt.Sprintf("%d settled=%v already=%v", a.code, a.settled, a.already)
}

func (r *replica) settle(t *testing.T, id string, actual int64) settleAnswer {
	t.Helper()
	var body struct{ Settled, Already bool }
	code := r.post(t, "/v1/settle", fmt.Sprintf(`{"id":%q,"actual":%d}`, id, actual), &body)
	return settleAnswer{code, body.Settled, body.Already}
}

// check charges cost to user's budget through /v1/check and says whether
// Redis decided it.
func (r *replica) check(t *testing.T, user string, cost int64) reserveAnswer {
	t.Helper()
	var a reserveAnswer
	a.code = r.post(t, "/v1/check", fmt.Sprintf(`{"descriptors":{"user":%q},"cost":%d}`, user, cost), &a.body)
	return a
}

// left returns what Redis says is left of user's budget, through the
// replica's inspect API; ok is false if the replica could not ask Redis.
func (r *replica) left(t *testing.T, user string) (left int64, ok bool) {
	t.Helper()
	var body struct {
		Limits []struct {
			FailOpen  bool `json:"fail_open"`
			Remaining int64
		}
	}
	code := r.post(t, "/v1/admin/inspect", fmt.Sprintf(`{"descriptors":{"user":%q}}`, user), &body)
	if code != http.StatusOK || len(body.Limits) != 1 || body.Limits[0].FailOpen {
		return 0, false
	}
	return body.Limits[0].Remaining, true
}

// expectLeft fails unless Redis holds exactly want of user's budget.
func (r *replica) expectLeft(t *testing.T, user string, want int64, when string) {
	t.Helper()
	var got int64
	testkit.Eventually(t, 20*time.Second, r.name+" answering inspect from Redis", func() bool {
		var ok bool
		got, ok = r.left(t, user)
		return ok
	})
	if got != want {
		t.Fatalf("%s: Redis holds %d of %s's 1000 left, want %d", when, got, user, want)
	}
}

// waitLeft waits until Redis holds want of user's budget (something
// applied late), failing if it holds anything but before or want.
func (r *replica) waitLeft(t *testing.T, user string, before, want int64, what string) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, what, func() bool {
		got, ok := r.left(t, user)
		if ok && got != before && got != want {
			t.Fatalf("%s: Redis holds %d of %s's budget, want %d (or %d until then)", what, got, user, want, before)
		}
		return ok && got == want
	})
}

// settleUntilAnswered retries a settle until the store answers it (not
// 503) and returns that answer; every try is a retry of the same settle.
func (r *replica) settleUntilAnswered(t *testing.T, id string, actual int64) settleAnswer {
	t.Helper()
	var a settleAnswer
	testkit.Eventually(t, 20*time.Second, r.name+" settling "+id+" on Redis", func() bool {
		a = r.settle(t, id, actual)
		return a.code != http.StatusServiceUnavailable
	})
	return a
}

// A settle whose reply is late: Redis applied it, the replica answers 503
// (the store did not answer in time), and the retried settle answers
// already-settled: the refund is applied once.
func TestFaultSettleReplyLateAppliesOnce(t *testing.T) {
	t.Parallel()
	g := newFaultRig(t)
	a, b := g.replica("A"), g.replica("B")
	const user = "late-settle"

	if r := a.reserve(t, "r1", user, 100); r.code != http.StatusOK || !r.body.Allowed || r.body.Limits[0].FailOpen {
		t.Fatalf("reserve 100: %d %+v, want allowed by Redis", r.code, r.body)
	}
	b.expectLeft(t, user, 900, "after reserving 100")

	a.connectAll(t)
	a.relay.Hold(tcprelay.Replies)
	sent := a.relay.Written(tcprelay.Requests)
	if s := a.settle(t, "r1", 60); s.code != http.StatusServiceUnavailable {
		t.Fatalf("settle with its reply held: %s, want 503", s)
	}
	if a.relay.Written(tcprelay.Requests) == sent {
		t.Fatal("the settle never reached Redis")
	}
	b.waitLeft(t, user, 900, 940, "Redis applying the settle whose reply is held")
	a.relay.Release(tcprelay.Replies) // the late reply arrives, to a caller long gone

	if s := a.settleUntilAnswered(t, "r1", 60); s.code != http.StatusOK || !s.already {
		t.Errorf("retried settle on A: %s, want 200 already settled", s)
	}
	if s := b.settle(t, "r1", 60); s.code != http.StatusOK || !s.already {
		t.Errorf("retried settle on B: %s, want 200 already settled", s)
	}
	b.expectLeft(t, user, 940, "after the retries")
	a.expectLeft(t, user, 940, "after the retries, asked through A")
}

// A reserve whose reply is late: Redis charged it, the replica admitted it
// on its local fail-open budget; once settled, Redis holds exactly the
// settled cost, whether the settle reaches Redis at once (the relay is fast
// again) or is taken locally during the outage and reconciled afterwards.
// And a reserve that never reached Redis: once settled, Redis holds
// exactly the settled cost too.
func TestFaultReserveReplyLateLeavesNoPhantomCharge(t *testing.T) {
	t.Parallel()
	g := newFaultRig(t)
	a, b := g.replica("A"), g.replica("B")

	// lateReserve reserves 100 for user on A with Redis' replies held, and
	// waits for Redis to have charged it.
	lateReserve := func(t *testing.T, id, user string) {
		t.Helper()
		a.connectAll(t)
		a.relay.Hold(tcprelay.Replies)
		r := a.reserve(t, id, user, 100)
		if r.code != http.StatusOK || !r.body.Allowed || len(r.body.Limits) != 1 || !r.body.Limits[0].FailOpen {
			t.Fatalf("reserve with its reply held: %d %+v, want allowed on the local fail-open budget", r.code, r.body)
		}
		b.waitLeft(t, user, 1000, 900, "Redis charging the reserve whose reply is held")
	}
	// probe charges 1 to user through A, decided by Redis: a check is when
	// A writes back what its fail-open budget admitted.
	probe := func(t *testing.T, user string) {
		t.Helper()
		r := a.check(t, user, 1)
		if r.code != http.StatusOK || len(r.body.Limits) != 1 || r.body.Limits[0].FailOpen {
			t.Fatalf("check of 1 through A: %d %+v, want decided by Redis", r.code, r.body)
		}
	}

	t.Run("settled once the relay is fast", func(t *testing.T) {
		const user = "late-reserve-fast"
		lateReserve(t, "r1", user)
		a.relay.Release(tcprelay.Replies)
		if s := a.settleUntilAnswered(t, "r1", 60); s.code != http.StatusOK || s.already {
			t.Fatalf("settle: %s, want 200 settled", s)
		}
		b.expectLeft(t, user, 940, "after settling at 60")
		probe(t, user)
		b.expectLeft(t, user, 939, "after settling at 60 and a check of 1 through A")
	})

	t.Run("settled during the outage and reconciled", func(t *testing.T) {
		const user = "late-reserve-reconciled"
		lateReserve(t, "r2", user)
		// A partition: the settle reaches nothing and is taken locally.
		a.relay.Hold(tcprelay.Requests)
		if s := a.settle(t, "r2", 60); s.code != http.StatusOK || s.already {
			t.Fatalf("settle during the outage: %s, want 200 settled locally", s)
		}
		b.expectLeft(t, user, 900, "after the local settle, before A reaches Redis")
		// The waiting bytes (the late reply and the settle) are dropped.
		a.relay.Reset()
		a.relay.Release(tcprelay.Requests)
		a.relay.Release(tcprelay.Replies)
		a.connectAll(t) // a call that succeeds starts the reconciling
		b.waitLeft(t, user, 900, 940, "A reconciling its local settle with Redis")
		probe(t, user)
		b.expectLeft(t, user, 939, "after reconciling and a check of 1 through A")
	})

	t.Run("the reserve never reached Redis", func(t *testing.T) {
		const user = "lost-reserve"
		a.connectAll(t)
		a.relay.Hold(tcprelay.Requests)
		r := a.reserve(t, "r3", user, 100)
		if r.code != http.StatusOK || !r.body.Allowed || len(r.body.Limits) != 1 || !r.body.Limits[0].FailOpen {
			t.Fatalf("reserve with its request held: %d %+v, want allowed on the local fail-open budget", r.code, r.body)
		}
		a.relay.Reset() // the reserve is dropped
		a.relay.Release(tcprelay.Requests)
		b.expectLeft(t, user, 1000, "after a reserve that never reached Redis")
		// Once A reaches Redis again it records the reservation there by its
		// id, charged as it was locally.
		a.connectAll(t)
		b.waitLeft(t, user, 1000, 900, "A recording the reservation it took locally")
		if s := a.settle(t, "r3", 60); s.code != http.StatusOK || s.already {
			t.Fatalf("settle: %s, want 200 settled", s)
		}
		b.expectLeft(t, user, 940, "after settling at 60")
		probe(t, user)
		b.expectLeft(t, user, 939, "after settling at 60 and a check of 1 through A")
	})
}

// Two replicas settle each other's reservations once, also when the
// settling replica's reply is late and the other one retries.
func TestFaultReplicasSettleEachOthersReservationsOnce(t *testing.T) {
	t.Parallel()
	g := newFaultRig(t)
	a, b := g.replica("A"), g.replica("B")

	t.Run("reserve on A, settle on B, retry on A", func(t *testing.T) {
		const user = "two-replicas"
		if r := a.reserve(t, "r1", user, 100); r.code != http.StatusOK || !r.body.Allowed {
			t.Fatalf("reserve on A: %d %+v", r.code, r.body)
		}
		if s := b.settle(t, "r1", 60); s.code != http.StatusOK || s.already {
			t.Fatalf("settle on B: %s, want 200 settled", s)
		}
		if s := a.settle(t, "r1", 60); s.code != http.StatusOK || !s.already {
			t.Errorf("retried settle on A: %s, want 200 already settled", s)
		}
		// A retried reserve replays the recorded answer and charges nothing.
		if r := a.reserve(t, "r1", user, 100); r.code != http.StatusOK || !r.body.Allowed || r.body.Limits[0].Remaining != 900 {
			t.Errorf("retried reserve of the settled id on A: %d %+v, want the recorded answer (900 left)", r.code, r.body)
		}
		a.expectLeft(t, user, 940, "after one settle at 60")
		b.expectLeft(t, user, 940, "after one settle at 60, asked through B")
	})

	t.Run("B's settle reply is late, A retries", func(t *testing.T) {
		const user = "two-replicas-late"
		if r := a.reserve(t, "r2", user, 100); r.code != http.StatusOK || !r.body.Allowed {
			t.Fatalf("reserve on A: %d %+v", r.code, r.body)
		}
		b.connectAll(t)
		b.relay.Hold(tcprelay.Replies)
		if s := b.settle(t, "r2", 60); s.code != http.StatusServiceUnavailable {
			t.Fatalf("settle on B with its reply held: %s, want 503", s)
		}
		a.waitLeft(t, user, 900, 940, "Redis applying B's settle")
		if s := a.settle(t, "r2", 60); s.code != http.StatusOK || !s.already {
			t.Errorf("retried settle on A: %s, want 200 already settled", s)
		}
		b.relay.Release(tcprelay.Replies)
		if s := b.settleUntilAnswered(t, "r2", 60); s.code != http.StatusOK || !s.already {
			t.Errorf("retried settle on B: %s, want 200 already settled", s)
		}
		a.expectLeft(t, user, 940, "after B's late settle and both retries")
	})
}
