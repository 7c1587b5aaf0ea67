package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/server/httpapi"
	"github.com/tokenlimit/tokenlimit/service"
	"github.com/tokenlimit/tokenlimit/web"
)

// planeConfig has one limit of each plane key (its calls in the last
// hour); the budgets are sliding logs so that no window boundary empties
// them while a test watches them.
const planeConfig = `
limits:
  - {name: calls, key: [api_key], algorithm: sliding_log, limit: 1000/h}
`

// planeServer is tokenlimit serve's handler: the HTTP API with a quota
// plane in memory and the dashboard under it, with the admin token
// "s3cret".
type planeServer struct {
	*httptest.Server
	svc *service.Service
}

// newPlaneServer starts a planeServer whose plane and service read clock
// (time.Now for real time).
func newPlaneServer(t *testing.T, clock func() time.Time) *planeServer {
	t.Helper()
	var svc *service.Service
	pl, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{
		KnownPlan: func(n string) bool { return svc.KnownPlan(n) }, Logger: testkit.Quiet(), Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	svc = testkit.NewService(t, testkit.Setup{Store: testkit.Memory, Config: testkit.ParseConfig(t, planeConfig), Clock: clock,
		Edit: func(o *service.Options) { o.Plane = pl }}).Service
	dash, err := web.New(svc, web.Options{AdminToken: "s3cret", Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(svc, httpapi.Options{AdminToken: "s3cret", Plane: pl, Dashboard: dash, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &planeServer{srv, svc}
}

// post sends body to path with the admin token, and returns the status
// and the answer's fields.
func (s *planeServer) post(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	return s.admin(t, http.MethodPost, path, body)
}

// admin sends method path with body ("" for none) and the admin token, and
// returns the status and the answer's fields.
func (s *planeServer) admin(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer s3cret")
	req.Header.Set("Content-Type", "application/json")
	return send(t, req)
}

// check asks /v1/check for a call made with the api key secret.
func (s *planeServer) check(t *testing.T, secret string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/check", strings.NewReader(`{"descriptors": {"api_key": "`+secret+`"}}`))
	if err != nil {
		t.Fatal(err)
	}
	code, _ := send(t, req)
	return code
}

func send(t *testing.T, req *http.Request) (int, map[string]any) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out) // an error answer without a body leaves out nil
	return res.StatusCode, out
}

// unlock types the admin token on a plane page and shows its records.
func (tb *tab) unlock(page string) {
	tb.t.Helper()
	tb.wait(`document.querySelector('#` + page + `-off').hidden && !document.querySelector('#` + page + `-load').disabled`)
	tb.do(chromedp.SetValue(chromedp.ID(page+"-token"), "s3cret"))
	tb.click("#" + page + "-load")
	tb.wait(`document.querySelector('#` + page + `-summary').textContent.includes(' of ')`)
}

// budget is the JavaScript of a budget's list item in a row of a table.
func budget(table, name, limit string) string {
	return `document.querySelector('` + table + ` tr[data-name="` + name + `"] li[data-limit="` + limit + `"]')`
}

// confirm waits for the confirmation dialog and chooses OK.
func (tb *tab) confirm(question string) {
	tb.t.Helper()
	tb.wait(`document.querySelector('#confirm').open`)
	if q := eval[string](tb, `document.querySelector('#confirm-text').textContent`); !strings.Contains(q, question) {
		tb.t.Errorf("the dialog asks %q, want %q in it", q, question)
	}
	tb.click("#confirm-ok")
	tb.wait(`!document.querySelector('#confirm').open`)
}

// TestBrowserPlane drives the Teams and API keys pages in headless
// Chromium against the API with a quota plane, as tokenlimit serve serves
// them.
func TestBrowserPlane(t *testing.T) {
	browserCtx := startBrowser(t)
	shots := screenshotDir(t)

	// Create a key, see its secret once and copy it, see its usage move
	// with calls made with it, find it by name, label and team, rotate it
	// (the old secret is refused, the new one keeps the budget) and
	// revoke it (calls are refused).
	t.Run("keys", func(t *testing.T) {
		srv := newPlaneServer(t, time.Now)
		if code, b := srv.post(t, "/v1/admin/teams", `{"name": "acme"}`); code != http.StatusCreated {
			t.Fatalf("POST teams: %d %v", code, b)
		}
		if code, b := srv.post(t, "/v1/admin/keys", `{"name": "nightly batch", "labels": {"env": "prod"}}`); code != http.StatusCreated {
			t.Fatalf("POST keys: %d %v", code, b)
		}
		tb := openTab(t, browserCtx, srv.Server, "keys", shots)
		for _, name := range []string{"clipboard-read", "clipboard-write"} {
			if _, err := chromedp.CallBrowser(tb.ctx, browser.SetPermission, browser.SetPermissionParams{
				Permission: &browser.PermissionDescriptor{Name: name}, Setting: browser.PermissionSettingGranted, Origin: srv.URL,
			}); err != nil {
				t.Fatalf("granting %s: %v", name, err)
			}
		}
		tb.unlock("keys")
		tb.wait(`document.querySelector('#keys-summary').textContent.startsWith('1 of 1 key')`)
		tb.wait(`document.querySelector('#keys-team').options.length === 2`) // no team, acme

		tb.click("#keys-new summary")
		tb.do(chromedp.SetValue(chromedp.ID("keys-name"), "ci runner"), chromedp.SetValue(chromedp.ID("keys-team"), "acme"),
			chromedp.SetValue(chromedp.ID("keys-labels"), "env=ci\nowner=dora"),
			chromedp.SetValue(chromedp.ID("keys-limits"), `[{"name": "own", "algorithm": "sliding_log", "limit": "5/h"}]`))
		tb.click("#keys-add")
		tb.wait(`!document.querySelector('#keys-secret').hidden`)
		secret := eval[string](tb, `document.querySelector('#keys-secret-value').value`)
		if !strings.HasPrefix(secret, "tl-") {
			t.Fatalf("the page shows the secret %q, want tl-…", secret)
		}
		tb.wait(budget("#keys-table", "ci runner", "calls") + `?.dataset.used === '0'`)
		if level := eval[string](tb, budget("#keys-table", "ci runner", "own")+`.dataset.level`); level != "key" {
			t.Errorf("the budget own is of level %q, want key", level)
		}
		// Copy puts the secret on the clipboard.
		tb.click("#keys-copy")
		tb.wait(`document.querySelector('#keys-status').textContent === 'Copied the secret.'`)
		if got := evalAwait[string](tb, `navigator.clipboard.readText()`); got != secret {
			t.Errorf("the clipboard holds %q, want the secret", got)
		}
		tb.screenshots("keys-secret")
		// Done: the secret is gone from the page, and nothing shows it
		// again.
		tb.click("#keys-secret-done")
		tb.wait(`document.querySelector('#keys-secret').hidden`)
		onPage := `(s) => document.documentElement.outerHTML.includes(s) || document.body.innerText.includes(s) ||
			[...document.querySelectorAll('input, textarea')].some((i) => i.value.includes(s))`
		if eval[bool](tb, `(`+onPage+`)('`+secret+`')`) {
			t.Error("the secret is still on the page after Done")
		}

		// Calls with the key move its usage bar.
		for range 3 {
			if code := srv.check(t, secret); code != http.StatusOK {
				t.Fatalf("a call with the new key: %d, want 200", code)
			}
		}
		tb.wait(budget("#keys-table", "ci runner", "calls") + `.dataset.used === '3'`)
		tb.wait(budget("#keys-table", "ci runner", "own") + `.dataset.remaining === '2'`)
		if bar := eval[string](tb, budget("#keys-table", "ci runner", "own")+`.querySelector('[role=meter] span').style.width`); bar != "60%" {
			t.Errorf("own's bar is %s wide, want 60%% (3 of 5)", bar)
		}

		// Search by label, team and name.
		search := func(q string, want ...string) {
			t.Helper()
			tb.do(chromedp.Evaluate[chromedp.Void](`{ const s = document.querySelector('#keys-search'); s.value = '` + q + `'; s.dispatchEvent(new Event('input')); }`))
			tb.wait(`[...document.querySelectorAll('#keys-table tbody tr')].map((r) => r.dataset.name).join(',') === '` + strings.Join(want, ",") + `'`)
		}
		search("env=ci", "ci runner")
		search("ACME", "ci runner")
		search("batch", "nightly batch")
		search("prod", "nightly batch")
		search("", "ci runner", "nightly batch")
		tb.phoneTable("#keys-table")
		tb.screenshots("keys")

		// Rotate: a new secret, shown once; the old one is refused at once
		// (no grace), the new one draws from the same budgets.
		tb.click(`#keys-table tr[data-name="ci runner"] button[aria-label="Rotate key ci runner"]`)
		tb.confirm("new secret")
		tb.wait(`!document.querySelector('#keys-secret').hidden`)
		rotated := eval[string](tb, `document.querySelector('#keys-secret-value').value`)
		if !strings.HasPrefix(rotated, "tl-") || rotated == secret {
			t.Fatalf("after rotation the page shows %q", rotated)
		}
		tb.click("#keys-secret-done")
		if code := srv.check(t, secret); code != http.StatusUnauthorized {
			t.Errorf("a call with the replaced secret: %d, want 401", code)
		}
		if code := srv.check(t, rotated); code != http.StatusOK {
			t.Fatalf("a call with the rotated secret: %d, want 200", code)
		}
		tb.wait(budget("#keys-table", "ci runner", "calls") + `.dataset.used === '4'`)

		// Revoke: the row goes, and calls with the secret are refused. A
		// refresh the poll started before the revoke may still ask for the
		// key's usage once it is gone: that one 404 is the page's race, not
		// an error.
		revoked := eval[string](tb, `document.querySelector('#keys-table tr[data-name="ci runner"]').dataset.id`)
		tb.expect("the server responded with a status of 404 (Not Found) " + srv.URL + "/v1/admin/keys/" + revoked + "/usage")
		tb.click(`#keys-table tr[data-name="ci runner"] button[aria-label="Revoke key ci runner"]`)
		tb.confirm("Revoke key ci runner?")
		tb.wait(`document.querySelector('#keys-status').textContent.startsWith('Revoked key ci runner')`)
		tb.wait(`!document.querySelector('#keys-table tr[data-name="ci runner"]')`)
		if code := srv.check(t, rotated); code != http.StatusUnauthorized {
			t.Errorf("a call with the revoked key: %d, want 401", code)
		}
		if eval[bool](tb, `(`+onPage+`)('`+rotated+`')`) {
			t.Error("the rotated secret is still on the page")
		}
	})

	// Two concurrent edits of one key: the page rotates, then revokes, a
	// key that was edited through the API after the page showed it. The
	// server refuses each with 412; the page says that nothing was done
	// and shows the key as it is now; the API's edit stands, and the key's
	// secret is neither replaced nor revoked. Tried again on the key as
	// shown, the rotation goes through.
	t.Run("conflict", func(t *testing.T) {
		srv := newPlaneServer(t, time.Now)
		code, k := srv.post(t, "/v1/admin/keys", `{"name": "ci runner", "labels": {"owner": "dora"}}`)
		id, _ := k["id"].(string)
		secret, _ := k["secret"].(string)
		if code != http.StatusCreated || id == "" || secret == "" {
			t.Fatalf("POST keys: %d %v", code, k)
		}
		tb := openTab(t, browserCtx, srv.Server, "keys", shots)
		tb.expect("the server responded with a status of 412 (Precondition Failed) " + srv.URL + "/v1/admin/keys/" + id)
		tb.unlock("keys")
		row := `document.querySelector('#keys-table tr[data-name="ci runner"]')`
		tb.wait(row + `?.textContent.includes('owner=dora')`)
		for _, c := range []struct{ action, question, owner string }{
			{"Rotate", "Give key ci runner a new secret?", "erin"},
			{"Revoke", "Revoke key ci runner?", "frank"},
		} {
			tb.click(`#keys-table tr[data-name="ci runner"] button[aria-label="` + c.action + ` key ci runner"]`)
			tb.wait(`document.querySelector('#confirm').open`)
			// While the page asks, someone edits the key through the API.
			code, edited := srv.admin(t, http.MethodPut, "/v1/admin/keys/"+id, `{"name": "ci runner", "labels": {"owner": "`+c.owner+`"}}`)
			if code != http.StatusOK {
				t.Fatalf("PUT the key: %d %v", code, edited)
			}
			// The status line still holds the last action's answer: clear
			// it, so that the wait below sees this one's.
			tb.do(chromedp.Evaluate[chromedp.Void](`{ const s = document.querySelector('#keys-status'); s.textContent = ''; s.classList.remove('error'); }`))
			tb.confirm(c.question)
			tb.wait(`document.querySelector('#keys-status').classList.contains('error')`)
			if msg := eval[string](tb, `document.querySelector('#keys-status').textContent`); !strings.Contains(msg, "Nothing was done") || !strings.Contains(msg, "changed elsewhere") {
				t.Errorf("%s of a key edited meanwhile: the page says %q, want that nothing was done as the key changed", c.action, msg)
			}
			if !eval[bool](tb, `document.querySelector('#keys-secret').hidden`) {
				t.Errorf("%s of a key edited meanwhile shows a secret", c.action)
			}
			// The page shows the key as the API left it.
			if labels := eval[string](tb, row+`.cells[2].textContent`); labels != "owner="+c.owner {
				t.Errorf("after the refused %s the page shows labels %q, want owner=%s", c.action, labels, c.owner)
			}
			// Nothing was overwritten: the API's edit stands, at its version,
			// and the key's one secret still works.
			code, now := srv.admin(t, http.MethodGet, "/v1/admin/keys/"+id, "")
			if code != http.StatusOK || now["version"] != edited["version"] || now["labels"].(map[string]any)["owner"] != c.owner || now["previous_valid_until"] != nil {
				t.Errorf("after the refused %s the key is %d %v, want it as the API's edit left it: %v", c.action, code, now, edited)
			}
			if code := srv.check(t, secret); code != http.StatusOK {
				t.Errorf("after the refused %s a call with the key's secret: %d, want 200", c.action, code)
			}
		}

		tb.click(`#keys-table tr[data-name="ci runner"] button[aria-label="Rotate key ci runner"]`)
		tb.confirm("new secret")
		tb.wait(`!document.querySelector('#keys-secret').hidden`)
		tb.wait(`document.querySelector('#keys-status').textContent === 'Rotated key ci runner.'`)
		rotated := eval[string](tb, `document.querySelector('#keys-secret-value').value`)
		tb.click("#keys-secret-done")
		if code := srv.check(t, rotated); code != http.StatusOK {
			t.Errorf("a call with the secret of the rotation tried again: %d, want 200", code)
		}
		if code := srv.check(t, secret); code != http.StatusUnauthorized {
			t.Errorf("a call with the secret rotated away without grace: %d, want 401", code)
		}
	})

	// Rotating with a grace period from the page: the old secret keeps
	// working until the grace ends, to the second, and the new one works;
	// both draw from the key's one budget. Time is a fake clock that the
	// plane and the service share.
	t.Run("grace", func(t *testing.T) {
		clk := testkit.NewClock(time.Now().Truncate(time.Second))
		srv := newPlaneServer(t, clk.Now)
		code, k := srv.post(t, "/v1/admin/keys", `{"name": "ci runner"}`)
		id, _ := k["id"].(string)
		secret, _ := k["secret"].(string)
		if code != http.StatusCreated || id == "" || secret == "" {
			t.Fatalf("POST keys: %d %v", code, k)
		}
		tb := openTab(t, browserCtx, srv.Server, "keys", shots)
		tb.unlock("keys")
		row := `document.querySelector('#keys-table tr[data-name="ci runner"]')`
		tb.wait(row)
		tb.click(`#keys-table tr[data-name="ci runner"] button[aria-label="Rotate key ci runner"]`)
		tb.wait(`document.querySelector('#confirm').open`)
		tb.do(chromedp.SetValue(chromedp.ID("confirm-grace"), "1h"))
		tb.confirm("new secret")
		tb.wait(`!document.querySelector('#keys-secret').hidden`)
		rotatedAt := clk.Now()
		rotated := eval[string](tb, `document.querySelector('#keys-secret-value').value`)
		if !strings.HasPrefix(rotated, "tl-") || rotated == secret {
			t.Fatalf("after rotation the page shows %q", rotated)
		}
		tb.click("#keys-secret-done")

		// The page and the API say until when the old secret is valid.
		tb.wait(row + `.textContent.includes('old secret valid until')`)
		code, got := srv.admin(t, http.MethodGet, "/v1/admin/keys/"+id, "")
		until, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got["previous_valid_until"]))
		if code != http.StatusOK || err != nil || !until.Equal(rotatedAt.Add(time.Hour)) {
			t.Errorf("the rotated key: %d %v, want previous_valid_until %s", code, got, rotatedAt.Add(time.Hour).Format(time.RFC3339))
		}

		for _, s := range []string{secret, rotated} {
			if code := srv.check(t, s); code != http.StatusOK {
				t.Errorf("within the grace period a call with %s secret: %d, want 200", map[bool]string{true: "the old", false: "the new"}[s == secret], code)
			}
		}
		tb.wait(budget("#keys-table", "ci runner", "calls") + `?.dataset.used === '2'`)
		if reset := eval[string](tb, budget("#keys-table", "ci runner", "calls")+`.textContent`); !regexp.MustCompile(`whole again in (59(\.\d)?|60) min \(`).MatchString(reset) {
			t.Errorf("the budget calls says %q, want when it is whole again (in an hour, and at what time)", reset)
		}
		clk.Advance(time.Hour - time.Second)
		if code := srv.check(t, secret); code != http.StatusOK {
			t.Errorf("a second before the grace ends, a call with the old secret: %d, want 200", code)
		}
		clk.Advance(time.Second)
		if code := srv.check(t, secret); code != http.StatusUnauthorized {
			t.Errorf("once the grace has ended, a call with the old secret: %d, want 401", code)
		}
		if code := srv.check(t, rotated); code != http.StatusOK {
			t.Errorf("once the grace has ended, a call with the new secret: %d, want 200", code)
		}
	})

	// Create a team, see the budgets its keys share move (calls and spend),
	// fail to delete it while a key names it, find it by label, delete
	// another.
	t.Run("teams", func(t *testing.T) {
		srv := newPlaneServer(t, time.Now)
		if code, b := srv.post(t, "/v1/admin/teams", `{"name": "ops", "labels": {"cost-center": "7"}}`); code != http.StatusCreated {
			t.Fatalf("POST teams: %d %v", code, b)
		}
		tb := openTab(t, browserCtx, srv.Server, "teams", shots)
		tb.unlock("teams")
		tb.wait(`document.querySelector('#teams-summary').textContent.startsWith('1 of 1 team')`)
		tb.click("#teams-new summary")
		tb.do(chromedp.SetValue(chromedp.ID("teams-name"), "research"), chromedp.SetValue(chromedp.ID("teams-labels"), "cost-center=42"),
			chromedp.SetValue(chromedp.ID("teams-limits"), `[{"name": "team-calls", "algorithm": "sliding_log", "limit": "100/h"},
				{"name": "team-usd", "unit": "usd", "algorithm": "fixed_window", "limit": "50.00/day"}]`))
		tb.click("#teams-add")
		tb.wait(`document.querySelector('#teams-status').textContent === 'Created team research.'`)
		tb.wait(budget("#teams-table", "research", "team-calls") + `?.dataset.used === '0'`)

		code, key := srv.post(t, "/v1/admin/keys", `{"name": "lab", "team": "research"}`)
		secret, _ := key["secret"].(string)
		if code != http.StatusCreated || secret == "" {
			t.Fatalf("POST keys: %d %v", code, key)
		}
		for range 2 {
			if code := srv.check(t, secret); code != http.StatusOK {
				t.Fatalf("a call with the team's key: %d", code)
			}
		}
		// A priced call, as the proxy makes: $1.25.
		if _, err := srv.svc.Check(context.Background(), service.Request{Descriptors: map[string]string{"api_key": secret}, Spend: 1_250_000}); err != nil {
			t.Fatal(err)
		}
		row := `document.querySelector('#teams-table tr[data-name="research"]')`
		tb.wait(budget("#teams-table", "research", "team-calls") + `.dataset.used === '3'`)
		tb.wait(row + `.querySelector('.spend[data-limit="team-usd"]')?.textContent === '$1.25 of $50.00 (team-usd)'`)
		if keys := eval[string](tb, row+`.cells[3].textContent`); keys != "1" {
			t.Errorf("research has %q keys, want 1", keys)
		}
		tb.phoneTable("#teams-table")
		tb.screenshots("teams")

		// A team that a key names is not deleted.
		tb.expect("the server responded with a status of 409 (Conflict) " + srv.URL + "/v1/admin/teams/research")
		tb.click(`#teams-table tr[data-name="research"] button[aria-label="Delete team research"]`)
		tb.confirm("Delete team research?")
		tb.wait(`document.querySelector('#teams-status').classList.contains('error')`)
		if msg := eval[string](tb, `document.querySelector('#teams-status').textContent`); !strings.Contains(msg, "still has keys") {
			t.Errorf("deleting a team with keys says %q", msg)
		}
		tb.do(chromedp.Evaluate[chromedp.Void](`{ const s = document.querySelector('#teams-search'); s.value = 'cost-center=7'; s.dispatchEvent(new Event('input')); }`))
		tb.wait(`[...document.querySelectorAll('#teams-table tbody tr')].map((r) => r.dataset.name).join(',') === 'ops'`)
		tb.click(`#teams-table tr[data-name="ops"] button[aria-label="Delete team ops"]`)
		tb.confirm("Delete team ops?")
		tb.wait(`document.querySelector('#teams-status').textContent === 'Deleted team ops.'`)
		tb.wait(`document.querySelector('#teams-summary').textContent.startsWith('0 of 1 team')`)
	})

	// Without an admin token the pages say they are off, and how to turn
	// them on, before anything is typed.
	t.Run("off", func(t *testing.T) {
		e := newEnv(t, nil, web.Options{}, true)
		srv := httptest.NewServer(mounted(t, e))
		t.Cleanup(srv.Close)
		for _, page := range []string{"keys", "teams"} {
			tb := openTab(t, browserCtx, srv, page, shots)
			tb.wait(`!document.querySelector('#` + page + `-off').hidden`)
			if note := eval[string](tb, `document.querySelector('#`+page+`-off').textContent`); !strings.Contains(note, "--admin-token") {
				t.Errorf("%s: note %q, want it to name --admin-token", page, note)
			}
			if enabled := eval[[]string](tb, `[...document.querySelectorAll('#page-`+page+` form :is(input, select, textarea, button)')].filter((c) => !c.disabled).map((c) => c.id)`); len(enabled) > 0 {
				t.Errorf("%s: controls %v are enabled while the plane is off", page, enabled)
			}
		}
	})
}

// evalAwait is eval of an expression whose value is a promise.
func evalAwait[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("%s: %v", expr, err)
	}
	return v
}
