package web_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/server/httpapi"
	"github.com/tokenlimit/tokenlimit/service"
	"github.com/tokenlimit/tokenlimit/web"
)

// leaseConfig has a leased limit in the main store ("hot": leases of 50
// that outlive the test, from a bucket that refills nothing within it), a
// limit without leases, and a limit in the named store home. home's URL
// carries a password, which no page may show (the service is given the
// store itself; the URL is tokenlimit serve's to dial).
const leaseConfig = `
stores:
  home: {redis: "redis://:hunter2@127.0.0.1:1"}
limits:
  - {name: hot, match: {route: /hot}, key: [tenant], algorithm: token_bucket, capacity: 1000, refill: 1/h, lease: {size: 50, ttl: 10m}}
  - {name: per-user, key: [user], algorithm: fixed_window, limit: 100/h}
  - {name: global, match: {route: /global}, key: [tenant], algorithm: fixed_window, limit: 100/h, store: home, failure_mode: closed}
`

// leaseServer is tokenlimit serve's handler over a service whose main
// store and named store home are each a real redis-server, on real time.
type leaseServer struct {
	*httptest.Server
	svc  *service.Service
	home *redistest.Server
}

func newLeaseServer(t *testing.T) *leaseServer {
	t.Helper()
	home := redistest.Start(t)
	cfg := testkit.ParseConfig(t, leaseConfig)
	svc := testkit.NewService(t, testkit.Setup{Store: testkit.Redis, Client: testkit.Rueidis, Config: cfg, Clock: time.Now,
		Edit: func(o *service.Options) {
			// A stopped home fails its calls at once; its timeout only
			// bounds a call on a machine too loaded to answer.
			o.Stores = map[string]service.NamedStore{"home": {Store: testkit.RedisStore(t, home.Addr(), testkit.Rueidis), Timeout: 2 * time.Second}}
		}}).Service
	t.Cleanup(svc.Close) // returns the leases before the redis-servers stop
	dash, err := web.New(svc, web.Options{AdminToken: "s3cret", Stats: svc.Stats(), Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(svc, httpapi.Options{AdminToken: "s3cret", Dashboard: dash, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &leaseServer{srv, svc, home}
}

// check sends n checks of route for tenant acme to /v1/check, and returns
// the last answer's status.
func (s *leaseServer) check(t *testing.T, route string, n int) int {
	t.Helper()
	status := 0
	for range n {
		res, err := http.Post(s.URL+"/v1/check", "application/json",
			strings.NewReader(`{"descriptors": {"tenant": "acme", "user": "ann", "route": "`+route+`"}}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		status = res.StatusCode
	}
	return status
}

// TestBrowserLeases: the Limits page shows a leased limit's lease terms,
// what this replica's leases hold, and its takes and returns, following
// the calls; nothing more for the other limits; at 390 px too. The key
// inspector says what a lease does to a budget's "used". The overview
// shows the named store's health, failing once its redis-server stops.
func TestBrowserLeases(t *testing.T) {
	browser := startBrowser(t)
	shots := screenshotDir(t)
	s := newLeaseServer(t)

	t.Run("limits", func(t *testing.T) {
		tb := openTab(t, browser, s.Server, "limits", shots)
		lease := `document.querySelector('#lim-table tr[data-limit="hot"] .lease')`
		facts := func(want string) string {
			return `(() => { const d = ` + lease + `?.dataset; return d && [d.outstanding, d.leased, d.unused, d.taken, d.returned].join(' ') === '` + want + `'; })()`
		}
		// outstanding, leased, unused, taken, returned
		tb.wait(facts("0 0 0 0 0"))
		if n := eval[int](tb, `document.querySelectorAll('#lim-table .lease').length`); n != 1 {
			t.Errorf("%d limits show leases, want 1 (hot)", n)
		}
		if got := eval[string](tb, `document.querySelector('#lim-table tr[data-limit="per-user"]').cells[4].textContent`); got != "100 per 60 min"+"Kept in the main store" {
			t.Errorf("per-user's budget %q, want only its budget and its store", got)
		}
		// With a limit in a named store, each limit says where its budgets live.
		stores := eval[string](tb, `[...document.querySelectorAll('#lim-table tbody tr')].map((r) => r.dataset.limit + ': ' + r.querySelector('.store-of')?.textContent).join('; ')`)
		if want := "hot: Kept in the main store; per-user: Kept in the main store; global: Kept in the store home"; stores != want {
			t.Errorf("the limits' stores read %q, want %q", stores, want)
		}

		// The first call takes a lease of 50; ten calls leave 40.
		if st := s.check(t, "/hot", 10); st != http.StatusOK {
			t.Fatalf("calls of hot answered %d", st)
		}
		tb.wait(facts("1 50 40 1 0"))
		if text := eval[string](tb, lease+`.textContent`); !strings.Contains(text, "Leased 50 at a time, each for up to 10 min") ||
			!strings.Contains(text, "This replica holds 1 lease: 40 of 50 unused") || !strings.Contains(text, "1 lease taken, 0 returned") {
			t.Errorf("hot's lease reads %q", text)
		}
		// Below half a lease left, the next one is taken ahead of time.
		s.check(t, "/hot", 20)
		tb.wait(facts("2 100 70 2 0"))
		// A reload returns both leases' unused 70.
		s.svc.Reload(testkit.ParseConfig(t, leaseConfig))
		tb.wait(facts("0 0 0 2 70"))
		if text := eval[string](tb, lease+`.textContent`); !strings.Contains(text, "This replica holds no lease now") ||
			!strings.Contains(text, "2 leases taken, 70 returned") {
			t.Errorf("hot's lease after the reload reads %q", text)
		}
		s.check(t, "/hot", 1)
		tb.wait(facts("1 50 49 3 70"))

		tb.phoneTable("#lim-table")
		tb.do(chromedp.EmulateViewport(390, 844))
		if over := eval[bool](tb, `(() => { const l = `+lease+`, r = l.getBoundingClientRect();
			return r.left < 0 || r.right > window.innerWidth || l.scrollWidth > l.clientWidth + 1; })()`); over {
			t.Error("at 390 px hot's lease does not fit its cell")
		}
		if over := eval[bool](tb, `(() => { const s = document.querySelector('#lim-table tr[data-limit="global"] .store-of'), r = s.getBoundingClientRect();
			return r.width === 0 || r.left < 0 || r.right > window.innerWidth; })()`); over {
			t.Error("at 390 px global's store does not show within the screen")
		}
		tb.do(chromedp.EmulateViewport(1280, 800))
		tb.screenshots("limits-leased")
		noSecrets(tb)
	})

	t.Run("key inspector", func(t *testing.T) {
		tb := openTab(t, browser, s.Server, "inspector", shots)
		tb.wait(`document.querySelectorAll('#ins-limit option').length === 4`)
		tb.do(chromedp.SetValue(chromedp.ID("ins-token"), "s3cret"), chromedp.SetValue(chromedp.ID("ins-tenant"), "acme"),
			chromedp.SetValue(chromedp.ID("ins-route"), "/hot"))
		tb.click("#ins-go")
		note := `document.querySelector('#ins-table tr[data-limit="hot"] .lease-note')`
		tb.wait(note + `?.textContent.includes('hold 49 unused')`)
		if n := eval[int](tb, `document.querySelectorAll('#ins-table .lease-note').length`); n != 1 {
			t.Errorf("%d budgets carry the lease note, want 1 (hot)", n)
		}
		tb.phoneTable("#ins-table")
		noSecrets(tb)
	})

	t.Run("named store", func(t *testing.T) {
		tb := openTab(t, browser, s.Server, "overview", shots)
		home := `document.querySelector('#ov-stores li[data-store="home"]')`
		tb.wait(home + `?.dataset.health === 'ok' && ` + home + `.textContent === 'home ok'`)
		if eval[bool](tb, `document.querySelector('#ov-stores-card').hidden`) {
			t.Error("the named stores' card is hidden")
		}
		if st := s.check(t, "/global", 1); st != http.StatusOK {
			t.Fatalf("a call of global answered %d while home runs", st)
		}
		s.home.Stop()
		// Fail-closed: each call fails on the stopped store; five open
		// its breaker (DefaultBreakerThreshold).
		if st := s.check(t, "/global", 5); st != http.StatusServiceUnavailable {
			t.Errorf("a call of global answered %d with home stopped, want 503", st)
		}
		tb.wait(home + `.dataset.health === 'failing' && ` + home + `.querySelector('.badge').textContent === 'breaker open'`)
		if errText := eval[string](tb, home+`.querySelector('.store-error')?.textContent || ''`); errText == "" {
			t.Error("the failing store shows no error")
		}
		if store := eval[string](tb, `document.querySelector('#ov-breaker').textContent`); store != "circuit breaker closed" {
			t.Errorf("the main store reads %q while only home fails", store)
		}
		tb.screenshots("overview-named-stores")
		noSecrets(tb)
	})
}

// noSecrets fails the test if the page shows the admin token or home's
// password anywhere in its document.
func noSecrets(tb *tab) {
	tb.t.Helper()
	page := eval[string](tb, `document.documentElement.outerHTML + document.body.innerText`)
	for _, secret := range []string{"s3cret", "hunter2"} {
		if strings.Contains(page, secret) {
			tb.t.Errorf("the page shows the secret %q", secret)
		}
	}
}
