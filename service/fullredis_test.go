package service_test

import (
	"testing"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// TestFullRedisIsAFullStore: a Redis at its maxmemory under noeviction is
// answered as a full embedded store (TestFullStoreIsNotAFailingStore): the
// request is denied as key_space_full on a fail-open limit as on a
// fail-closed one, the breaker stays closed, no store error is counted,
// and nothing is charged.
func TestFullRedisIsAFullStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testkit.Redis, boundsConfig, t0)
	if d := e.check(D{"user": "a"}, 1); !d.Allowed {
		t.Fatalf("user a before Redis is full: %s", describe(d))
	}
	maxmemory := func(v string) {
		for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", v}} {
			if _, err := e.redis.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	maxmemory("1")
	for _, desc := range []D{{"user": "a"}, {"user": "c"}, {"user": "c", "route": "/pay"}} {
		d := e.check(desc, 1)
		if d.Allowed || !d.KeySpaceFull || d.Unavailable {
			t.Errorf("%v on a full Redis: %s, want denied as key_space_full", desc, describe(d))
		}
		for _, o := range d.Limits {
			if o.Allowed || o.FailOpen {
				t.Errorf("%v: outcome %+v, want denied, not fail-open", desc, o)
			}
		}
	}
	if got := testkit.Metric(t, e.reg, "tokenlimit_store_errors_total", "store", "default"); got != 0 {
		t.Errorf("store errors = %v, want 0: a full Redis is not a failing one", got)
	}
	if got := testkit.Metric(t, e.reg, "tokenlimit_key_space_full_total", "store", "store"); got != 3 {
		t.Errorf("key_space_full_total{store} = %v, want 3", got)
	}
	if h := e.svc.Health(); h.Breaker != "closed" || h.Degraded {
		t.Errorf("health on a full Redis: %+v, want the breaker closed, not degraded", h)
	}
	maxmemory("0")
	if got := e.remaining(D{"user": "a"}, "open-per-user"); got != 4 {
		t.Errorf("user a: %d left after the refused checks, want 4 (only the first charged)", got)
	}
	if got := e.remaining(D{"user": "c", "route": "/pay"}, "closed-per-user"); got != 5 {
		t.Errorf("user c on /pay: %d left, want 5 (nothing charged)", got)
	}
}
