package web_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/service/stats"
	"github.com/tokenlimit/tokenlimit/web"
)

// The browser tests drive the dashboard in a real headless Chromium
// (Debian's chromium package; scripts/test.sh installs it). Without it they
// skip loudly, except when CI=true: then they fail, so that CI never passes
// by skipping. TOKENLIMIT_CHROMIUM overrides the browser's path, and
// TOKENLIMIT_SCREENSHOTS names a directory that keeps the screenshots (by
// default they go to a temporary directory, removed after the test).

// chromium returns the browser's path, or skips or fails the test.
func chromium(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("TOKENLIMIT_CHROMIUM"), "/usr/bin/chromium"}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			candidates = append(candidates, p)
		}
	}
	for _, p := range candidates {
		if fi, err := os.Stat(p); p != "" && err == nil && !fi.IsDir() {
			return p
		}
	}
	msg := "Chromium not found (looked at $TOKENLIMIT_CHROMIUM, /usr/bin/chromium and PATH): " +
		"install it with apt-get install chromium, or run scripts/test.sh"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Log("\n" + strings.Repeat("!", 72) + "\nSKIPPING THE BROWSER TESTS: " + msg + "\n" + strings.Repeat("!", 72))
	t.Skip(msg)
	return ""
}

// startBrowser starts a headless Chromium with a fresh profile, stopped when
// the test ends.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	alloc, stop := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(stop)
	browser, closeBrowser := chromedp.NewContext(alloc)
	t.Cleanup(closeBrowser)
	if err := chromedp.Do(browser); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", chromium(t), err)
	}
	return browser
}

// tab is one page of the dashboard in its own browser tab, with the
// console errors it reported.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string
	shot string // screenshot directory

	mu      sync.Mutex
	errors  []string
	expects []string // errors the test provokes, by a part of their text
}

// openTab opens a tab on srv's page at fragment, collecting every console
// error, uncaught exception and error log entry (failed loads, CSP
// violations); the test fails if there is any when it ends.
func openTab(t *testing.T, browser context.Context, srv *httptest.Server, fragment, shotDir string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	tb := &tab{t: t, ctx: ctx, base: srv.URL, shot: shotDir}
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				tb.record("console." + string(ev.Type) + ": " + strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			text := d.Text
			if d.Exception != nil {
				text += " " + d.Exception.Description
			}
			tb.record(fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, text))
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError {
				tb.record(fmt.Sprintf("log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		for _, e := range tb.errors {
			t.Errorf("browser reported %s", e)
		}
	})
	tb.do(chromedp.EmulateViewport(1280, 800), chromedp.Navigate(srv.URL+"/#"+fragment))
	return tb
}

func (tb *tab) record(e string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, x := range tb.expects {
		if strings.Contains(e, x) {
			return
		}
	}
	tb.errors = append(tb.errors, e)
}

// expect lets the browser report errors holding text (such as the failed
// load of an answer the test provokes) without failing the test.
func (tb *tab) expect(text string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.expects = append(tb.expects, text)
}

func (tb *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, actions...); err != nil {
		tb.t.Fatal(err)
	}
}

// wait waits until the JavaScript expression is truthy.
func (tb *tab) wait(expr string) {
	tb.t.Helper()
	if _, err := chromedp.Run(tb.ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		tb.t.Fatalf("waiting for %s: %v", expr, err)
	}
}

func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

func (tb *tab) click(sel string) {
	tb.t.Helper()
	tb.do(chromedp.Click(chromedp.CSS(sel)))
}

// screenshots saves the page at laptop and phone widths, and checks that at
// both widths nothing overflows sideways and every field has a label.
func (tb *tab) screenshots(name string) {
	tb.t.Helper()
	for _, vp := range []struct {
		suffix string
		w, h   int64
	}{{"laptop", 1280, 800}, {"phone", 390, 844}} {
		tb.do(chromedp.EmulateViewport(vp.w, vp.h))
		if over := eval[bool](tb, `document.documentElement.scrollWidth > window.innerWidth + 1`); over {
			tb.t.Errorf("%s at %dpx: the page scrolls sideways (%s)", name, vp.w,
				eval[string](tb, `document.documentElement.scrollWidth + "px wide"`))
		}
		png, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			tb.t.Fatal(err)
		}
		path := filepath.Join(tb.shot, name+"-"+vp.suffix+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			tb.t.Fatal(err)
		}
	}
	tb.do(chromedp.EmulateViewport(1280, 800))
	unlabeled := eval[[]string](tb, `Array.from(document.querySelectorAll('input, select, textarea, button'))
		.filter((e) => e.tagName === 'BUTTON' ? !e.textContent.trim() : !e.labels.length && !e.getAttribute('aria-label'))
		.map((e) => e.id || e.outerHTML)`)
	if len(unlabeled) > 0 {
		tb.t.Errorf("%s: fields without a label: %v", name, unlabeled)
	}
}

// phoneTable checks a table at 390 px phone width: nothing of it is behind
// a sideways scroll, every body cell is in view with a value, and every
// data cell shows its column's name beside its value (the row stacks).
func (tb *tab) phoneTable(table string) {
	tb.t.Helper()
	tb.do(chromedp.EmulateViewport(390, 844))
	defer tb.do(chromedp.EmulateViewport(1280, 800))
	type cell struct {
		Text, Label, Head string
		Left, Right, W, H float64
	}
	cells := eval[[]cell](tb, `(() => { const t = document.querySelector('`+table+`');
		const heads = [...t.tHead.rows[0].cells].map((th) => th.textContent);
		return [...t.tBodies[0].rows].flatMap((tr) => [...tr.cells].map((c, i) => { const r = c.getBoundingClientRect();
			return {text: c.textContent.trim(), label: c.tagName === 'TD' ? getComputedStyle(c, '::before').content : '"' + heads[i] + '"',
				head: heads[i], left: r.left, right: r.right, w: r.width, h: r.height}; })); })()`)
	if len(cells) == 0 {
		tb.t.Fatalf("%s has no cells", table)
	}
	width := eval[float64](tb, `window.innerWidth`)
	for _, c := range cells {
		if c.Text == "" || c.W <= 0 || c.H <= 0 || c.Left < 0 || c.Right > width+1 {
			tb.t.Errorf("%s at 390 px: %s cell %q spans %.0f to %.0f px (%.0fx%.0f), want it in view with a value",
				table, c.Head, c.Text, c.Left, c.Right, c.W, c.H)
		}
		if c.Label != strconv.Quote(c.Head) {
			tb.t.Errorf("%s at 390 px: %s cell %q is labelled %s, want its column's name", table, c.Head, c.Text, c.Label)
		}
	}
	if eval[bool](tb, `(() => { const w = document.querySelector('`+table+`').parentElement; return w.scrollWidth > w.clientWidth + 1; })()`) {
		tb.t.Errorf("%s at 390 px scrolls sideways", table)
	}
}

// logEntries returns the data-allowed and data-retry-ms of a log's entries,
// oldest first.
func logEntries(tb *tab, list string) (allowed []bool, retryMs []int64, text []string) {
	type item struct {
		Allowed bool   `json:"allowed"`
		Retry   int64  `json:"retry"`
		Text    string `json:"text"`
	}
	items := eval[[]item](tb, `Array.from(document.querySelectorAll('`+list+` li')).reverse().map((li) =>
		({allowed: li.dataset.allowed === 'true', retry: Number(li.dataset.retryMs), text: li.textContent}))`)
	for _, it := range items {
		allowed, retryMs, text = append(allowed, it.Allowed), append(retryMs, it.Retry), append(text, it.Text)
	}
	return allowed, retryMs, text
}

// stoppableClock is real time that a test can stop: stopped, it reads the
// instant it stopped at; started again, it goes on from that instant (the
// time it was stopped never passes for it). Safe for concurrent use.
type stoppableClock struct {
	mu      sync.Mutex
	behind  time.Duration // how far the clock is behind real time
	stopped *time.Time
}

func (c *stoppableClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped != nil {
		return *c.stopped
	}
	return time.Now().Add(-c.behind)
}

// Stop stops the clock; it is a no-op on a stopped clock.
func (c *stoppableClock) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped == nil {
		at := time.Now().Add(-c.behind)
		c.stopped = &at
	}
}

// Start lets a stopped clock go on from where it stopped.
func (c *stoppableClock) Start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped != nil {
		c.behind = time.Since(*c.stopped)
		c.stopped = nil
	}
}

// screenshotDir is $TOKENLIMIT_SCREENSHOTS, else a temporary directory.
func screenshotDir(t *testing.T) string {
	t.Helper()
	shots := os.Getenv("TOKENLIMIT_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shots)
	return shots
}

func TestBrowser(t *testing.T) {
	browser := startBrowser(t)
	shots := screenshotDir(t)
	// The simulators' clicks below are decided at a stopped clock: on a
	// loaded machine the clicks may take longer than the budgets' refill.
	clock := &stoppableClock{}
	e := newEnv(t, clock.Now, web.Options{AdminToken: "s3cret"}, false)
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)

	// Six clicks on "Send request": five ALLOW, then a DENY with its
	// retry-after.
	t.Run("sliding window", func(t *testing.T) {
		tb := openTab(t, browser, srv, "window", shots)
		tb.wait(`document.querySelector('#win-count').textContent === '0/5'`)
		clock.Stop()
		defer clock.Start()
		for i := 1; i <= 6; i++ {
			tb.click("#win-send")
			tb.wait(fmt.Sprintf(`document.querySelectorAll('#win-log li').length === %d`, i))
		}
		allowed, retry, text := logEntries(tb, "#win-log")
		for i := range 5 {
			if !allowed[i] || retry[i] != 0 || !strings.Contains(text[i], "ALLOW") {
				t.Errorf("request %d: %q, want ALLOW", i+1, text[i])
			}
		}
		if allowed[5] || retry[5] <= 0 || retry[5] > 5000 || !strings.Contains(text[5], "DENY") || !strings.Contains(text[5], "retry after") {
			t.Errorf("request 6: %q (retry after %d ms), want DENY with a retry-after", text[5], retry[5])
		}
		if got := eval[string](tb, `document.querySelector('#win-count').textContent`); got != "5/5" {
			t.Errorf("window count %q", got)
		}
		if dots := eval[int](tb, `document.querySelectorAll('#win-track .dot').length`); dots != 6 {
			t.Errorf("%d points on the timeline, want 6", dots)
		}
		tb.screenshots("sliding-window")
	})

	// On a full bucket, Chat then four Embeds: four ALLOWs (1+3+3+3 = 10)
	// and a DENY whose retry-after is 1.5 s (3 tokens at 2/s), at a stopped
	// clock; started again, the gauge refills.
	t.Run("token bucket", func(t *testing.T) {
		tb := openTab(t, browser, srv, "bucket", shots)
		tb.wait(`document.querySelector('#bkt-level').textContent === '10.00 / 10'`)
		clock.Stop()
		defer clock.Start()
		for i, button := range []string{"#bkt-chat", "#bkt-embed", "#bkt-embed", "#bkt-embed", "#bkt-embed"} {
			tb.click(button)
			tb.wait(fmt.Sprintf(`document.querySelectorAll('#bkt-log li').length === %d`, i+1))
		}
		allowed, retry, text := logEntries(tb, "#bkt-log")
		want := []bool{true, true, true, true, false}
		for i := range want {
			if allowed[i] != want[i] {
				t.Errorf("charge %d: %q", i+1, text[i])
			}
		}
		if !strings.Contains(text[0], "Chat (cost 1)") || !strings.Contains(text[4], "Embed (cost 3)") {
			t.Errorf("log %q", text)
		}
		if retry[4] <= 0 || retry[4] > 1500 || !strings.Contains(text[4], "retry after") {
			t.Errorf("the denial %q: retry after %d ms, want (0, 1500]", text[4], retry[4])
		}
		// The gauge refills live (the page peeks at the bucket).
		clock.Start()
		tb.wait(`parseFloat(document.querySelector('#bkt-level').textContent) >= 1`)
		tb.screenshots("token-bucket")
	})

	// The naive path over-admits; the atomic check admits exactly the limit.
	t.Run("race", func(t *testing.T) {
		tb := openTab(t, browser, srv, "race", shots)
		tb.wait(`document.querySelector('#race-atomic').dataset.admitted !== undefined`)
		naive := eval[int](tb, `Number(document.querySelector('#race-naive').dataset.admitted)`)
		atomic := eval[int](tb, `Number(document.querySelector('#race-atomic').dataset.admitted)`)
		if naive <= 10 || atomic != 10 {
			t.Errorf("limit 10: naive admitted %d, atomic %d; want over 10 and exactly 10", naive, atomic)
		}
		// Everything in flight at once: all 30 get in the naive way.
		tb.do(chromedp.SetValue(chromedp.ID("race-requests"), "30"), chromedp.SetValue(chromedp.ID("race-inflight"), "15"))
		tb.click("#race-run")
		tb.wait(`document.querySelector('#race-naive').dataset.admitted === '30'`)
		if atomic := eval[string](tb, `document.querySelector('#race-atomic').dataset.admitted`); atomic != "10" {
			t.Errorf("atomic admitted %s of 30, want 10", atomic)
		}
		if chips := eval[int](tb, `document.querySelectorAll('#race-naive .chips li').length`); chips != 30 {
			t.Errorf("%d requests drawn, want 30", chips)
		}
		tb.screenshots("race")
	})

	t.Run("five algorithms", func(t *testing.T) {
		tb := openTab(t, browser, srv, "compare", shots)
		tb.wait(`document.querySelectorAll('#cmp-grid .card').length === 5`)
		most := func(alg string) string {
			return eval[string](tb, `document.querySelector('#cmp-grid [data-algorithm="`+alg+`"]').dataset.maxInWindow`)
		}
		if most("fixed_window") != "20" || most("sliding_log") != "10" {
			t.Errorf("bursts at a boundary: fixed window %s, sliding log %s in one window; want 20 and 10", most("fixed_window"), most("sliding_log"))
		}
		if bars := eval[int](tb, `document.querySelectorAll('#cmp-grid svg rect').length`); bars != 5*30 {
			t.Errorf("%d bars, want 150", bars)
		}
		// Each chart has a time axis from 0 s to the pattern's duration.
		axes := eval[[]string](tb, `[...document.querySelectorAll('#cmp-grid .chart .ticks')].map((t) => t.textContent)`)
		if len(axes) != 5 || !strings.HasPrefix(axes[0], "0 s") || !strings.HasSuffix(axes[0], " s") || len(axes[0]) < 12 {
			t.Errorf("time axes %q, want one per chart from 0 s", axes)
		}
		tb.do(chromedp.SetValue(chromedp.ID("cmp-pattern"), "weighted"))
		tb.click("#cmp-run")
		tb.wait(`document.querySelector('#cmp-status').textContent.startsWith('30 requests')`)
		tb.screenshots("five-algorithms")
	})

	// Traffic sent to the service shows in the overview's counters. The page
	// is served as tokenlimit serve serves it, under the HTTP API; the
	// traffic goes to /v1/check.
	t.Run("overview", func(t *testing.T) {
		api := httptest.NewServer(mounted(t, e))
		t.Cleanup(api.Close)
		send := func(desc string) {
			res, err := http.Post(api.URL+"/v1/check", "application/json", strings.NewReader(`{"descriptors": `+desc+`}`))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
		}
		tb := openTab(t, browser, api, "overview", shots)
		cell := func(limit, col string) string {
			return `document.querySelector('#ov-table td[data-limit="` + limit + `"][data-col="` + col + `"]')`
		}
		tb.wait(cell("hard-cap", "allowed") + `?.textContent === '0'`)
		for range 7 {
			send(`{"user": "dora", "route": "/v1/sensitive"}`)
		}
		send(`{"user": "erin", "route": "/v1/embed"}`)
		tb.wait(cell("hard-cap", "allowed") + `.textContent === '5' && ` + cell("hard-cap", "denied") + `.textContent === '2'`)
		tb.wait(cell("llm-budget", "allowed") + `.textContent === '8'`)
		// The shadow limit (2 a minute) saw dora's five admitted requests.
		tb.wait(cell("watch", "shadow") + `.textContent === '3'`)
		// ... and admitted two of dora's and erin's one: a shadow limit's
		// admissions are allowed decisions.
		tb.wait(cell("watch", "allowed") + `.textContent === '3'`)
		tb.phoneTable("#ov-table")
		if store := eval[string](tb, `document.querySelector('#ov-store').textContent`); store != "Embedded, in memory" {
			t.Errorf("store %q", store)
		}
		if polylines := eval[int](tb, `document.querySelectorAll('#ov-chart polyline').length`); polylines != 4 {
			t.Errorf("%d chart lines, want 4", polylines)
		}
		tb.screenshots("overview")
	})

	// Five minutes of synthetic history: the chart and the table over a
	// full window (and the overview picture of docs/dashboard.md).
	t.Run("overview history", func(t *testing.T) {
		st := history(time.Now())
		h := newEnv(t, nil, web.Options{Stats: st}, true)
		cfg, err := config.Parse([]byte(testConfig), "test.yaml")
		if err != nil {
			t.Fatal(err)
		}
		h.svc.Reload(cfg) // version 2, recorded by history
		hist := httptest.NewServer(h.h)
		t.Cleanup(hist.Close)
		tb := openTab(t, browser, hist, "overview", shots)
		tb.wait(`document.querySelector('#ov-reload').textContent.startsWith('reloaded at')`)
		tb.wait(`Number(document.querySelector('#ov-table td[data-limit="llm-budget"][data-col="failopen"]').textContent.replace(/,/g, '')) > 0`)
		points := eval[int](tb, `document.querySelector('#ov-chart polyline').getAttribute('points').split(' ').length`)
		if points != 300 {
			t.Errorf("the chart has %d points, want 300 (one per second)", points)
		}
		// A time axis: a label a minute back from now.
		labels := eval[[]string](tb, `[...document.querySelectorAll('#ov-ticks span')].map((s) => s.textContent)`)
		if len(labels) < 5 || labels[len(labels)-1] != "now" || labels[len(labels)-2] != "−1 min" {
			t.Errorf("overview time axis %q, want a label a minute ending at now", labels)
		}
		pick := func(limit string) {
			tb.do(chromedp.Evaluate[chromedp.Void](`{ const s = document.querySelector('#ov-limit'); s.value = '` + limit + `';
				s.dispatchEvent(new Event('change')); }`))
		}
		peak := `document.querySelector('#ov-peak').textContent`
		all := eval[string](tb, peak)
		pick("hard-cap")
		if one := eval[string](tb, peak); one == all {
			t.Errorf("choosing hard-cap left the chart's scale at %q", one)
		}
		pick("")
		tb.screenshots("overview-history")
	})

	t.Run("limits", func(t *testing.T) {
		tb := openTab(t, browser, srv, "limits", shots)
		tb.wait(`document.querySelectorAll('#lim-table tbody tr').length === 3`)
		if key := eval[string](tb, `document.querySelector('#lim-table tbody tr td code').textContent`); key != "hard-cap|user=<user>" {
			t.Errorf("hard-cap's key %q", key)
		}
		tb.phoneTable("#lim-table")
		tb.screenshots("limits")
	})

	// Spend budgets show their amounts in dollars, not micro-dollars.
	t.Run("spend limits", func(t *testing.T) {
		h := newEnv(t, nil, web.Options{}, true)
		cfg, err := config.Parse([]byte(`
prices:
  gpt-4o: {input: 2.50, output: 10}
limits:
  - {name: daily-spend, key: [api_key], unit: usd, algorithm: fixed_window, limit: 5.00/day}
  - {name: spend-bucket, key: [api_key], unit: usd, algorithm: token_bucket, capacity: 1.5, refill: 0.25/h}
`), "spend.yaml")
		if err != nil {
			t.Fatal(err)
		}
		h.svc.Reload(cfg)
		spend := httptest.NewServer(h.h)
		t.Cleanup(spend.Close)
		tb := openTab(t, browser, spend, "limits", shots)
		tb.wait(`document.querySelectorAll('#lim-table tbody tr').length === 2`)
		budgets := eval[string](tb, `[...document.querySelectorAll('#lim-table tbody tr')].map((r) => r.cells[4].textContent + ' / ' + r.cells[5].textContent).join('; ')`)
		if want := "$5.00 per 24 h / each call's price in US dollars; $1.50 of spend, refilling $0.25 per 60 min / each call's price in US dollars"; budgets != want {
			t.Errorf("budgets %q, want %q", budgets, want)
		}
	})

	// examples/llm-gateway.yaml on a 1366 px laptop: every column of the
	// Limits table is in view, none behind a sideways scroll.
	t.Run("limits at 1366 px", func(t *testing.T) {
		h := newEnv(t, nil, web.Options{}, true)
		data, err := os.ReadFile("../examples/llm-gateway.yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse(data, "examples/llm-gateway.yaml")
		if err != nil {
			t.Fatal(err)
		}
		h.svc.Reload(cfg)
		gw := httptest.NewServer(h.h)
		t.Cleanup(gw.Close)
		tb := openTab(t, browser, gw, "limits", shots)
		tb.wait(`document.querySelectorAll('#lim-table tbody tr').length === ` + fmt.Sprint(len(cfg.Limits)))
		tb.do(chromedp.EmulateViewport(1366, 768))
		hidden := eval[[]string](tb, `(() => { const wrap = document.querySelector('#lim-table').parentElement.getBoundingClientRect();
			return [...document.querySelectorAll('#lim-table thead th')].filter((th) => th.getBoundingClientRect().right > wrap.right + 1).map((th) => th.textContent); })()`)
		if len(hidden) > 0 || eval[bool](tb, `(() => { const w = document.querySelector('#lim-table').parentElement; return w.scrollWidth > w.clientWidth + 1; })()`) {
			t.Errorf("at 1366 px the Limits table hides %q behind a sideways scroll", hidden)
		}
		png, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(shots, "limits-llm-gateway-1366.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	})

	// With no admin token the inspector says it is off, and how to turn it
	// on, before anything is clicked; its form is disabled.
	t.Run("key inspector off", func(t *testing.T) {
		h := newEnv(t, nil, web.Options{}, true)
		off := httptest.NewServer(h.h)
		t.Cleanup(off.Close)
		tb := openTab(t, browser, off, "inspector", shots)
		tb.wait(`!document.querySelector('#ins-off').hidden`)
		if note := eval[string](tb, `document.querySelector('#ins-off').textContent`); !strings.Contains(note, "off") || !strings.Contains(note, "--admin-token") {
			t.Errorf("note %q, want it to say the inspector is off and name --admin-token", note)
		}
		if enabled := eval[[]string](tb, `[...document.querySelectorAll('#ins-form input, #ins-form button')].filter((c) => !c.disabled).map((c) => c.id)`); len(enabled) > 0 {
			t.Errorf("controls %v are enabled while the inspector is off", enabled)
		}
		tb.screenshots("key-inspector-off")
	})

	t.Run("key inspector", func(t *testing.T) {
		checked := time.Now()
		e.check(map[string]string{"user": "frank", "route": "/v1/embed"})
		tb := openTab(t, browser, srv, "inspector", shots)
		tb.wait(`document.querySelectorAll('#ins-limit option').length === 4`)
		tb.do(chromedp.SetValue(chromedp.ID("ins-token"), "s3cret"), chromedp.SetValue(chromedp.ID("ins-user"), "frank"))
		tb.click("#ins-go")
		tb.wait(`document.querySelectorAll('#ins-table tbody tr').length === 2`)
		tb.phoneTable("#ins-table")
		remaining := `document.querySelector('#ins-table tr[data-limit="llm-budget"] td[data-remaining]').dataset.remaining`
		// 3 taken, and 2 back per second since (the browser runs on the
		// real clock; a loaded machine takes seconds to open the tab).
		most := min(10, 7+int(2*time.Since(checked).Seconds()))
		if r, err := strconv.Atoi(eval[string](tb, remaining)); err != nil || r < 7 || r > most {
			t.Errorf("llm-budget remaining %d (%v), want 7 to %d", r, err, most)
		}
		tb.do(chromedp.SetValue(chromedp.ID("ins-limit"), "llm-budget"))
		tb.click("#ins-reset")
		// Wait for the reset's answer, not for a full bucket: on a slow
		// machine the refill alone fills it first.
		tb.wait(`document.querySelector('#ins-status').textContent.startsWith('Reset')`)
		tb.wait(remaining + ` === '10'`)
		if status := eval[string](tb, `document.querySelector('#ins-status').textContent`); status != "Reset 1 budget: llm-budget|user=frank" {
			t.Errorf("status %q", status)
		}
		// A sliding log shows its entries.
		e.check(map[string]string{"user": "frank", "route": "/v1/sensitive"})
		e.check(map[string]string{"user": "frank", "route": "/v1/sensitive"})
		tb.do(chromedp.SetValue(chromedp.ID("ins-route"), "/v1/sensitive"))
		tb.click("#ins-go")
		tb.wait(`document.querySelectorAll('#ins-table tr[data-limit="hard-cap"] details.entries li').length === 2`)
		if !eval[bool](tb, `document.querySelector('#ins-table details.entries').open = true`) {
			t.Error("could not open the log entries")
		}
		if !eval[bool](tb, `document.querySelector('#ins-off').hidden && !document.querySelector('#ins-go').disabled`) {
			t.Error("the inspector says it is off on a server with an admin token")
		}
		tb.screenshots("key-inspector")
	})
}

// history returns Stats holding five minutes of made-up traffic ending at
// now: a daily-looking wave of allowed requests on llm-budget with a burst
// of denials, a store outage answered fail-open, hard-cap denials and
// shadow denials, and a configuration reload.
func history(now time.Time) *stats.Stats {
	st := &stats.Stats{}
	pick := func(allowed bool, yes, no stats.Result) stats.Result {
		if allowed {
			return yes
		}
		return no
	}
	for s := range stats.Seconds {
		at := now.Add(time.Duration(s-stats.Seconds+1) * time.Second)
		wave := 30 + int(20*math.Sin(float64(s)/25))
		outage := s >= 240 && s < 255
		for i := range wave {
			allowed := !(s >= 150 && s < 180 && i%3 == 0)
			if outage {
				st.Count(at, "llm-budget", pick(allowed, stats.FailOpenAllowed, stats.FailOpenDenied))
			} else {
				st.Count(at, "llm-budget", pick(allowed, stats.Allowed, stats.Denied))
			}
			if i%4 == 0 {
				st.Count(at, "watch", pick(i%8 != 0, stats.ShadowAllowed, stats.ShadowDenied))
			}
			st.Time(at, time.Duration(40+i)*time.Microsecond)
		}
		for i := range 7 + int(3*math.Sin(float64(s)/9)) {
			st.Count(at, "hard-cap", pick(!(s >= 60 && s < 90 && i > 4), stats.Allowed, stats.Denied))
			st.Time(at, 50*time.Microsecond)
		}
	}
	st.RecordReload(now.Add(-2*time.Minute), 2, nil)
	return st
}
