package service_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/alert"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/tcprelay"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

// storesConfig puts "global" (5 an hour per tenant) in the store home and
// "local" (100 an hour per user) in the main store.
const storesConfig = `
stores:
  home: {redis: "redis://127.0.0.1:1"}
limits:
  - {name: global, key: [tenant], algorithm: fixed_window, limit: 5/h, store: home, failure_mode: closed}
  - {name: local, key: [user], algorithm: fixed_window, limit: 100/h}
`

// storesEnv is a service whose main store and store home are each a
// redis-server of their own, home reached through a relay.
type storesEnv struct {
	*env
	cfg     *config.Config
	home    tokenlimit.Store // home's store, past the relay
	main    tokenlimit.Store
	relay   *tcprelay.Relay
	homeSrv *redistest.Server
}

func newStoresEnv(t *testing.T, homeTimeout time.Duration) *storesEnv {
	t.Helper()
	homeSrv := redistest.Start(t)
	relay, err := tcprelay.Start(homeSrv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	se := &storesEnv{cfg: testkit.ParseConfig(t, storesConfig), relay: relay, homeSrv: homeSrv}
	se.home = testkit.RedisStore(t, relay.Addr(), testkit.Rueidis)
	se.env = newEnv(t, testkit.Redis, storesConfig, t0, func(o *service.Options) {
		o.Stores = map[string]service.NamedStore{"home": {Store: se.home, Timeout: homeTimeout}}
	})
	se.main = se.env.store
	return se
}

// left peeks at what the budget key of the limit named name has left in st.
func (se *storesEnv) left(st tokenlimit.Store, name, key string) int64 {
	se.t.Helper()
	var l tokenlimit.Limit
	for _, cl := range se.cfg.Limits {
		if cl.Name == name {
			l = cl.Limit
		}
	}
	results := make([]tokenlimit.Result, 1)
	if _, err := st.Check(context.Background(), se.clock.Now(), []tokenlimit.Item{{Key: key, Limit: l}}, results); err != nil {
		se.t.Fatalf("peek %s: %v", key, err)
	}
	return results[0].Remaining
}

// TestNamedStoreHoldsItsLimitsBudgets: each limit's budget is charged in
// the store it names, and in no other.
func TestNamedStoreHoldsItsLimitsBudgets(t *testing.T) {
	t.Parallel()
	se := newStoresEnv(t, 0)
	d := se.check(D{"tenant": "acme", "user": "u1"}, 1)
	if !d.Allowed || len(d.Limits) != 2 {
		t.Fatalf("first request: %s, want admitted by both limits", describe(d))
	}
	global, local := mustOutcome(t, d, "global").Key, mustOutcome(t, d, "local").Key
	for _, c := range []struct {
		store     tokenlimit.Store
		name, key string
		want      int64
	}{{se.home, "global", global, 4}, {se.main, "global", global, 5}, {se.main, "local", local, 99}, {se.home, "local", local, 100}} {
		if got := se.left(c.store, c.name, c.key); got != c.want {
			t.Errorf("%s (%s) in the %s store: %d left, want %d", c.name, c.key, map[bool]string{true: "home", false: "main"}[c.store == se.home], got, c.want)
		}
	}
	// Inspect reads each budget where it lives.
	if got := se.remaining(D{"tenant": "acme", "user": "u1"}, "global"); got != 4 {
		t.Errorf("Inspect: global has %d left, want 4", got)
	}
	// The listing says where: home for global, "" (the main store) for local.
	for _, l := range se.svc.Limits() {
		if want := map[string]string{"global": "home", "local": ""}[l.Name]; l.Store != want {
			t.Errorf("Limits: %s's store is %q, want %q", l.Name, l.Store, want)
		}
	}
}

// TestNamedStoreRefusalRefundsTheOtherStores: a request whose limits live
// in two stores is admitted by both or charged by neither.
func TestNamedStoreRefusalRefundsTheOtherStores(t *testing.T) {
	t.Parallel()
	se := newStoresEnv(t, 0)
	if d := se.check(D{"tenant": "acme"}, 5); !d.Allowed {
		t.Fatalf("filling global: %s", describe(d))
	}
	// The main store admits and charges local first; home refuses; local
	// is refunded.
	for range 3 {
		d := se.check(D{"tenant": "acme", "user": "u1"}, 2)
		if d.Allowed || d.Unavailable {
			t.Fatalf("global is spent: %s, want denied", describe(d))
		}
		if o := mustOutcome(t, d, "global"); o.Allowed || o.Remaining != 0 {
			t.Errorf("global's outcome %+v, want the denial", o)
		}
	}
	if got := se.left(se.main, "local", "local|user=u1"); got != 100 {
		t.Errorf("local after three refused requests: %d left, want 100 (every charge refunded)", got)
	}
	// Refused by the main store: home is not asked at all.
	if d := se.check(D{"user": "u2"}, 100); !d.Allowed {
		t.Fatalf("filling local: %s", describe(d))
	}
	if d := se.check(D{"tenant": "other", "user": "u2"}, 1); d.Allowed {
		t.Fatalf("local is spent: %s, want denied", describe(d))
	}
	if got := se.left(se.home, "global", "global|tenant=other"); got != 5 {
		t.Errorf("global of a request the main store refused: %d left, want 5", got)
	}
}

// TestNamedStoreReservationAcrossStores: a reservation spanning stores is
// recorded in both, settled in both by its id, and undone in the store that
// admitted it when the other refuses, so that the id reserves afresh.
func TestNamedStoreReservationAcrossStores(t *testing.T) {
	t.Parallel()
	se := newStoresEnv(t, 0)
	ctx := context.Background()
	req := service.Request{Descriptors: D{"tenant": "acme", "user": "u1"}, Cost: 3}
	if d := se.check(D{"tenant": "acme"}, 3); !d.Allowed {
		t.Fatalf("charging global: %s", describe(d))
	}
	d, err := se.svc.Reserve(ctx, "r1", req)
	if err != nil || d.Allowed || d.Reserved {
		t.Fatalf("reserve with 2 left of global: %s, %v; want denied", describe(d), err)
	}
	if got := se.left(se.main, "local", "local|user=u1"); got != 100 {
		t.Fatalf("local after the refused reservation: %d left, want 100", got)
	}
	// The next window: the same id reserves afresh (no replay of the undone part).
	se.clock.Advance(time.Hour)
	d, err = se.svc.Reserve(ctx, "r1", req)
	if err != nil || !d.Allowed || !d.Reserved || d.Replayed {
		t.Fatalf("reserve in the next window: %s, %v; want reserved afresh", describe(d), err)
	}
	if g, l := se.left(se.home, "global", "global|tenant=acme"), se.left(se.main, "local", "local|user=u1"); g != 2 || l != 97 {
		t.Errorf("after the reservation: global %d, local %d left; want 2 and 97", g, l)
	}
	if st, err := se.svc.Settle(ctx, "r1", 1); err != nil || st != tokenlimit.Settled {
		t.Fatalf("Settle: %v, %v; want settled", st, err)
	}
	if g, l := se.left(se.home, "global", "global|tenant=acme"), se.left(se.main, "local", "local|user=u1"); g != 4 || l != 99 {
		t.Errorf("after settling to 1: global %d, local %d left; want 4 and 99", g, l)
	}
	if st, err := se.svc.Settle(ctx, "r1", 1); err != nil || st != tokenlimit.AlreadySettled {
		t.Errorf("second Settle: %v, %v; want already settled", st, err)
	}
}

// TestNamedStoreFailsOnItsOwn: while the store home does not answer, its
// fail-closed limit makes requests that select it unavailable, requests
// on the main store alone are decided as before, readiness stays, and
// health and metrics name home; once it answers again its breaker closes.
func TestNamedStoreFailsOnItsOwn(t *testing.T) {
	t.Parallel()
	se := newStoresEnv(t, time.Second)
	// The first calls dial home and load the scripts, which a loaded
	// machine may take longer than the timeout to do.
	admitted := int64(0)
	testkit.Eventually(t, 20*time.Second, "home deciding", func() bool {
		if se.check(D{"tenant": "acme", "user": "u1"}, 1).Allowed {
			admitted++
		}
		return admitted > 0
	})
	se.relay.Reset()
	se.relay.Hold(tcprelay.Replies)
	testkit.Eventually(t, 20*time.Second, "home's breaker open", func() bool {
		d := se.check(D{"tenant": "acme", "user": "u1"}, 1)
		if d.Allowed || !d.Unavailable {
			t.Fatalf("home held: %s, want unavailable", describe(d))
		}
		return se.svc.Health().Stores[0].Breaker == "open"
	})
	if d := se.check(D{"user": "u1"}, 1); !d.Allowed || d.Unavailable {
		t.Errorf("a request on the main store alone while home fails: %s, want admitted", describe(d))
	}
	admitted++
	h := se.svc.Health()
	if h.Degraded || len(h.Stores) != 1 || h.Stores[0].Name != "home" || !h.Stores[0].Degraded || h.Stores[0].Error == "" {
		t.Errorf("Health() = %+v, want ready, with home degraded and its error", h)
	}
	if got := testkit.Metric(t, se.reg, "tokenlimit_breaker_state", "store", "home"); got != 2 {
		t.Errorf("tokenlimit_breaker_state{store=home} = %v, want 2 (open)", got)
	}
	if got := testkit.Metric(t, se.reg, "tokenlimit_store_errors_total", "store", "home"); got < 5 {
		t.Errorf("tokenlimit_store_errors_total{store=home} = %v, want the failures that opened the breaker", got)
	}
	if got := testkit.Metric(t, se.reg, "tokenlimit_store_errors_total", "store", "default"); got != 0 {
		t.Errorf("tokenlimit_store_errors_total{store=default} = %v, want 0", got)
	}
	// The local charge of every unavailable request was refunded.
	if got := se.left(se.main, "local", "local|user=u1"); got != 100-admitted {
		t.Errorf("local after the outage: %d left, want %d (the admitted requests only)", got, 100-admitted)
	}
	se.relay.Release(tcprelay.Replies)
	testkit.Eventually(t, 20*time.Second, "home answers again", func() bool {
		se.clock.Advance(time.Second) // past the breaker's cooldown
		return se.check(D{"tenant": "acme", "user": "u1"}, 1).Allowed && !se.svc.Health().Stores[0].Degraded
	})
}

// TestReloadRefusesAnUnknownStore: a configuration naming a store the
// service was not started with is refused and the running limits stay.
func TestReloadRefusesAnUnknownStore(t *testing.T) {
	t.Parallel()
	se := newStoresEnv(t, 0)
	other := testkit.ParseConfig(t, `
stores:
  home: {redis: "redis://127.0.0.1:1"}
  eu: {redis: "redis://127.0.0.1:2"}
limits:
  - {name: global, key: [tenant], algorithm: fixed_window, limit: 5/h, store: eu}
`)
	if err := se.svc.Reload(other); err == nil {
		t.Fatal("Reload with a limit on a store the service lacks: nil error")
	}
	if v := se.svc.ConfigVersion(); v != 1 {
		t.Errorf("ConfigVersion() = %d after a refused reload, want 1", v)
	}
	if got := testkit.Metric(t, se.reg, "tokenlimit_config_reloads_total", "result", "error"); got != 1 {
		t.Errorf("reloads{result=error} = %v, want 1", got)
	}
	_, err := service.New(other, service.Options{Store: testkit.MemStore(t)})
	if err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("New with a limit on a store it is not given: %v, want an error", err)
	}
}

// TestNamedStoreSettleByIDRaisesAlerts: a reservation spanning stores
// keeps its alert notes in each store's part, and a settlement by id alone
// on another replica raises what it crossed in both.
func TestNamedStoreSettleByIDRaisesAlerts(t *testing.T) {
	t.Parallel()
	const yml = `
stores:
  home: {redis: "redis://127.0.0.1:1"}
limits:
  - {name: global, key: [tenant], algorithm: fixed_window, limit: 100/h, store: home, alert_at: ["50%"]}
  - {name: local, key: [user], algorithm: fixed_window, limit: 200/h, alert_at: ["25%"]}
`
	hook := &webhook{}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	cfg := testkit.ParseConfig(t, yml)
	home := testkit.RedisStore(t, redistest.Start(t).Addr(), testkit.Rueidis)
	edit := func(o *service.Options) {
		o.Stores = map[string]service.NamedStore{"home": {Store: home}}
		o.Alerts = alert.Options{Webhook: srv.URL, Secret: []byte("k")}
	}
	a := testkit.NewService(t, testkit.Setup{Store: testkit.Redis, Config: cfg, Start: t0, Edit: edit})
	b := testkit.NewService(t, testkit.Setup{Store: testkit.Redis, Config: cfg, Start: t0, Redis: a.Redis,
		Edit: func(o *service.Options) { edit(o); o.Store = a.Store }})
	defer a.Service.Close()
	defer b.Service.Close()
	ctx := context.Background()
	d, err := a.Service.Reserve(ctx, "across", service.Request{Descriptors: D{"tenant": "acme", "user": "u"}, Cost: 10})
	if err != nil || !d.Allowed || len(d.Alerts) != 0 {
		t.Fatalf("reserve: %v, %s, alerts %v; want allowed, nothing crossed", err, describe(d), d.Alerts)
	}
	if st, err := b.Service.Settle(ctx, "across", 60); err != nil || st != tokenlimit.Settled {
		t.Fatalf("settle by id on the other replica: %v, %v", st, err)
	}
	testkit.Eventually(t, 10*time.Second, "both stores' events", func() bool { return len(hook.received()) >= 2 })
	events := hook.received()
	slices.SortFunc(events, func(x, y alert.Event) int { return strings.Compare(x.Limit, y.Limit) })
	if len(events) != 2 || events[0].Limit != "global" || events[0].Threshold != "50%" || events[0].Used != 60 ||
		events[1].Limit != "local" || events[1].Threshold != "25%" || events[1].Used != 60 {
		t.Fatalf("events %+v; want global's 50%% and local's 25%%, each at 60", events)
	}
}

// homeScripts is how many script calls (FCALL, EVALSHA, EVAL) home's redis-server
// has run, from INFO commandstats.
func (se *storesEnv) homeScripts() int {
	se.t.Helper()
	info, err := se.homeSrv.Do("INFO", "commandstats")
	if err != nil {
		se.t.Fatal(err)
	}
	total := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"fcall", "evalsha", "eval"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
				n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				if err != nil {
					se.t.Fatalf("INFO commandstats line %q: %v", line, err)
				}
				total += n
			}
		}
	}
	return total
}

// TestNamedStoreSettleSkipsStoresNotUsed: a reservation of the main
// store's limit alone is settled on this replica without a call to home
// (home's redis-server runs no script); one spanning both stores is
// settled in home with one call.
func TestNamedStoreSettleSkipsStoresNotUsed(t *testing.T) {
	t.Parallel()
	se := newStoresEnv(t, 0)
	ctx := context.Background()
	reserveSettle := func(id string, desc D) int {
		t.Helper()
		if d, err := se.svc.Reserve(ctx, id, service.Request{Descriptors: desc, Cost: 3}); err != nil || !d.Reserved {
			t.Fatalf("reserve %s: %s, %v", id, describe(d), err)
		}
		before := se.homeScripts()
		if st, err := se.svc.Settle(ctx, id, 1); err != nil || st != tokenlimit.Settled {
			t.Fatalf("settle %s: %v, %v", id, st, err)
		}
		return se.homeScripts() - before
	}
	if n := reserveSettle("local-only", D{"user": "u1"}); n != 0 {
		t.Errorf("settling a reservation of local alone ran %d scripts on home, want 0", n)
	}
	if n := reserveSettle("both", D{"tenant": "acme", "user": "u1"}); n != 1 {
		t.Errorf("settling a reservation of global and local ran %d scripts on home, want 1", n)
	}
	if got, want := se.left(se.main, "local", "local|user=u1"), int64(98); got != want {
		t.Errorf("local after two reservations settled to 1: %d left, want %d", got, want)
	}
	if got := se.left(se.home, "global", "global|tenant=acme"); got != 4 {
		t.Errorf("global after one reservation settled to 1: %d left, want 4", got)
	}
}
