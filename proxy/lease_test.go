package proxy_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/proxy"
)

// leasedSpendConfig gives each api key $5.00 a day, leased $0.10 at a
// time for 10s: the hot key of an organisation's budget.
const leasedSpendConfig = `
prices:
  gpt-4o: {input: 2.50, cached_input: 1.25, output: 10.00}
limits:
  - {name: spend-per-key, key: [api_key], unit: usd, algorithm: fixed_window, limit: 5.00/day, lease: {size: 0.10, ttl: 10s}}
api_keys:
  sk-demo-alice-0001: {user: alice}
`

// TestLeasedSpendBudgetMakesNoRedisCallPerRequest: the proxy reserves a
// call's estimated price and settles it in process, so a leased usd budget
// pays both from the replica's lease: twenty calls after the first make
// no Redis call at all (INFO commandstats), and once the leases are
// returned (the service closes) Redis holds exactly what the calls cost,
// to the micro-dollar.
func TestLeasedSpendBudgetMakesNoRedisCallPerRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testkit.Redis, withConfig(leasedSpendConfig))
	chat := `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`
	var spent int64
	call := func(i int) {
		t.Helper()
		if resp, body := e.post("/v1/chat/completions", alice, chat); resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, body)
		}
		s := e.waitSettled()
		if s.Err != nil || s.Spend == 0 || s.ReservedSpend <= s.Spend {
			t.Fatalf("call %d: settlement %+v; want a spend below its reservation", i, s)
		}
		spent += s.Spend
	}
	call(0) // takes the first lease
	before := redisCalls(t, e)
	for i := 1; i <= 20; i++ {
		call(i)
	}
	if after := redisCalls(t, e); after-before != 0 {
		info, _ := e.redis.Do("INFO", "commandstats")
		t.Fatalf("20 leased calls made %d Redis calls (commandstats before: %d, after: %d); want none\n%s", after-before, before, after, info)
	}
	for _, l := range e.svc.Limits() {
		if l.Name == "spend-per-key" && (l.Lease == nil || l.Lease.Outstanding != 1 || l.Lease.Unused != 100_000-spent) {
			t.Errorf("lease %+v; want one lease of 100,000 µ$ less the %d spent", l.Lease, spent)
		}
	}
	e.svc.Close() // returns the lease
	if got := e.used(alice, "")["spend-per-key"]; got != spent {
		t.Fatalf("Redis holds %d µ$ spent once the lease is returned; want the %d the calls cost", got, spent)
	}
}

// redisCalls is the number of commands e's redis-server has run, INFO
// itself left out.
func redisCalls(t *testing.T, e *env) int64 {
	t.Helper()
	info, err := e.redis.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		n += c
	}
	return n
}

// TestLeasedBudgetStopsAStream: a stream grown chunk by chunk on a leased
// token budget that stops streams pays its growths from the replica's
// leases (far fewer store reservations than growths), is stopped with no
// more delivered than the budget (to within one delta) and no less than
// the budget less the leases it held, and once the leases are returned
// the store holds exactly what was delivered.
func TestLeasedBudgetStopsAStream(t *testing.T) {
	t.Parallel()
	const cfg = `
api_keys:
  ` + alice + `: {user: alice}
limits:
  - {name: tokens, key: [api_key], algorithm: token_bucket, capacity: 10000, refill: 10000/day, lease: {size: 2000, ttl: 1h}}
`
	testkit.EachStore(t, func(t *testing.T, store string) {
		var counted *testkit.FaultStore
		e := newEnv(t, store, withConfig(cfg), withStore(func(st tokenlimit.Store) tokenlimit.Store {
			counted = &testkit.FaultStore{Store: st}
			return counted
		}))
		e.up.set(endless)
		resp := e.send(context.Background(), http.MethodPost, "/v1/chat/completions", alice,
			`{"model":"gpt-4o","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"Say hello"}]}`)
		events, err := sseEvents(resp.Body)
		resp.Body.Close()
		if err != nil || events[len(events)-1] != "[DONE]" {
			t.Fatalf("read %v, %v; want the stream stopped", events[max(0, len(events)-2):], err)
		}
		s := e.waitSettled()
		one := count(t, "gpt-4o", word)
		if !s.Stopped || s.Actual > 10000+one || s.Actual <= 10000-2*2000 {
			t.Errorf("settlement %+v: want stopped within the budget of 10,000 (less at most the leases' 4,000)", s)
		}
		growths := s.Grown / proxy.GrowthChunk
		if r := counted.Reserves(); growths < 15 || r > growths/2 {
			t.Errorf("%d growths of %d tokens made %d store reservations; want most paid from the leases", growths, proxy.GrowthChunk, r)
		}
		t.Logf("delivered %d of 10,000 in %d growths; %d store reservations", s.Actual, growths, counted.Reserves())
		e.svc.Close() // returns the leases
		assertUsed(t, e.used(alice, ""), map[string]int64{"tokens": s.Actual})
	})
}
