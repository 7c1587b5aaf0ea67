package service_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/service"
)

const boundsConfig = `
limits:
  - name: open-per-user
    key: [user]
    algorithm: fixed_window
    limit: 5/min
  - name: closed-per-user
    match: {route: /pay}
    key: [user]
    algorithm: fixed_window
    limit: 5/min
    failure_mode: closed
`

// TestFullStoreIsNotAFailingStore: when the embedded store holds --max-keys
// keys, a request that needs a new key is denied as key_space_full, for a
// fail-open limit as for a fail-closed one, nothing is charged, the keys
// already stored keep their budgets, and health and metrics show it.
func TestFullStoreIsNotAFailingStore(t *testing.T) {
	t.Parallel()
	st, err := memstore.New(memstore.Options{MaxKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "memory", boundsConfig, t0, func(o *service.Options) { o.Store = st })
	for _, u := range []string{"a", "b"} {
		if d := e.check(D{"user": u}, 1); !d.Allowed {
			t.Fatalf("user %s with room in the store: %s", u, describe(d))
		}
	}
	if h := e.svc.Health(); !h.KeySpaceFull || h.Keys != 2 || h.MaxKeys != 2 || h.Degraded {
		t.Errorf("Health() with 2 of 2 keys = %+v, want key_space_full, not degraded", h)
	}
	for _, desc := range []D{{"user": "c"}, {"user": "c", "route": "/pay"}} {
		d := e.check(desc, 1)
		if d.Allowed || !d.KeySpaceFull || d.Unavailable {
			t.Errorf("new user %v in a full store: %s, want denied as key_space_full", desc, describe(d))
		}
		for _, o := range d.Limits {
			if o.Allowed || o.FailOpen {
				t.Errorf("new user %v: outcome %+v, want denied, not fail-open", desc, o)
			}
		}
	}
	if st.Len() != 2 {
		t.Errorf("store holds %d keys after the refusals, want 2", st.Len())
	}
	if d := e.check(D{"user": "a"}, 1); !d.Allowed || d.Limits[0].Remaining != 3 {
		t.Errorf("user a, already stored: %s, want allowed with 3 left", describe(d))
	}
	if got := testkit.Metric(t, e.reg, "tokenlimit_key_space_full_total", "store", "store"); got != 2 {
		t.Errorf("key_space_full_total{store} = %v, want 2", got)
	}
	if got := testkit.Metric(t, e.reg, "tokenlimit_decisions_total", "limit", "open-per-user", "result", "key_space_full"); got != 2 {
		t.Errorf("decisions{open-per-user, key_space_full} = %v, want 2", got)
	}
	if got := testkit.Metric(t, e.reg, "tokenlimit_store_errors_total", "store", "default"); got != 0 {
		t.Errorf("store errors = %v, want 0: a full store is not a failing one", got)
	}
	if got := testkit.Metric(t, e.reg, "tokenlimit_store_keys", "store", "store"); got != 2 {
		t.Errorf("tokenlimit_store_keys{store} = %v, want 2", got)
	}
	if h := e.svc.Health(); h.Breaker != "closed" {
		t.Errorf("breaker %s after the refusals, want closed", h.Breaker)
	}
	// Reservations are refused the same way.
	d, err := e.svc.Reserve(context.Background(), "r1", service.Request{Descriptors: D{"user": "d"}})
	if err != nil || d.Allowed || !d.KeySpaceFull {
		t.Errorf("Reserve for a new user in a full store: %s, %v; want denied as key_space_full", describe(d), err)
	}
}

// TestFullLocalBudgetIsBounded: the local fail-open budget, used while a
// remote store fails, is bounded too (LocalMaxKeys); past it a request is
// denied as key_space_full, never admitted.
func TestFullLocalBudgetIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "memory", boundsConfig, t0, func(o *service.Options) {
		o.Store = &testkit.FaultStore{Store: o.Store, Info: testkit.Remote}
		o.Store.(*testkit.FaultStore).Set(testkit.Down)
		o.LocalMaxKeys = 1
	})
	if d := e.check(D{"user": "a"}, 1); !d.Allowed || !d.Limits[0].FailOpen {
		t.Fatalf("user a while the store fails: %s, want allowed on the local budget", describe(d))
	}
	d := e.check(D{"user": "b"}, 1)
	if d.Allowed || !d.KeySpaceFull || d.Unavailable {
		t.Errorf("user b with the local budget full: %s, want denied as key_space_full", describe(d))
	}
	if got := testkit.Metric(t, e.reg, "tokenlimit_key_space_full_total", "store", "local"); got != 1 {
		t.Errorf("key_space_full_total{local} = %v, want 1", got)
	}
	if h := e.svc.Health(); !h.KeySpaceFull || h.LocalKeys != 1 || h.LocalMaxKeys != 1 {
		t.Errorf("Health() = %+v, want the local budget full", h)
	}
}

// TestMaxKeysOverflow: a limit of 5/min per user with max_keys 100. Once
// 100 users hold keys, 200 new users sending one request each share one
// overflow budget of the limit: at most 5 of them are admitted; the first
// 100 keep their own budgets; once the keys' minute has passed new users
// get budgets of their own again.
func TestMaxKeysOverflow(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 5/min
    max_keys: 100
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		e := newEnv(t, store, yml, t0)
		for i := range 100 {
			if d := e.check(D{"user": "old" + strconv.Itoa(i)}, 1); !d.Allowed || d.Limits[0].Key != "per-user|user=old"+strconv.Itoa(i) {
				t.Fatalf("user %d of the first 100: %s, want allowed on its own key", i, describe(d))
			}
		}
		admitted := 0
		for i := range 200 {
			d := e.check(D{"user": "new" + strconv.Itoa(i)}, 1)
			if d.Limits[0].Key != "per-user|overflow" {
				t.Fatalf("new user %d: key %q, want the overflow budget", i, d.Limits[0].Key)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != 5 {
			t.Errorf("200 new users past max_keys: %d admitted, want 5 (the overflow budget's limit)", admitted)
		}
		if got := testkit.Metric(t, e.reg, "tokenlimit_key_overflow_total", "limit", "per-user"); got != 200 {
			t.Errorf("key_overflow_total{per-user} = %v, want 200", got)
		}
		if d := e.check(D{"user": "old7"}, 1); !d.Allowed || d.Limits[0].Remaining != 3 || d.Limits[0].Key != "per-user|user=old7" {
			t.Errorf("an old user: %s, want allowed on its own budget with 3 left", describe(d))
		}
		// Inspecting a new user shows the overflow budget and takes no place.
		if o := mustOutcome(t, e.inspect(D{"user": "peek"}), "per-user"); o.Key != "per-user|overflow" || o.Remaining != 0 {
			t.Errorf("inspect of a new user: %+v, want the empty overflow budget", o)
		}
		e.clock.Advance(time.Minute)
		if d := e.check(D{"user": "later"}, 1); !d.Allowed || d.Limits[0].Key != "per-user|user=later" {
			t.Errorf("a new user a minute later: %s, want allowed on its own key (the old keys expired)", describe(d))
		}
	})
}
