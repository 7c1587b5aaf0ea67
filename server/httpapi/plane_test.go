package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/server/httpapi"
	"github.com/tokenlimit/tokenlimit/service"
)

const planeConfig = `
plans:
  pro: {daily: 1000}
limits:
  - {name: rpm, key: [api_key], algorithm: fixed_window, limit: 100/min}
`

// newPlaneEnv is an env whose service and API share a plane on an
// in-memory store; logs collects the server's log.
func newPlaneEnv(t *testing.T, b backend, logs *testkit.Buffer) *env {
	t.Helper()
	var svc *service.Service
	p, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{
		KnownPlan: func(name string) bool { return svc.KnownPlan(name) }, Logger: testkit.Quiet(),
		PlanLimit: func(plan, name string) bool { return svc.PlanLimit(plan, name) },
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, b, setup{config: planeConfig, svc: func(o *service.Options) { o.Plane = p },
		opts: httpapi.Options{AdminToken: "admintoken", Plane: p, AdminName: "ops", Logger: slog.New(slog.NewJSONHandler(logs, nil))}})
	svc = e.svc
	return e
}

const admin = "Authorization: Bearer admintoken"

func TestPlaneAdminContract(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, b := range []backend{memBackend(), redisBackend(srv)} {
		var logs testkit.Buffer
		e := newPlaneEnv(t, b, &logs)
		r := e.post("/v1/admin/teams", `{"name": "acme", "plan": "pro", "limits": [{"name": "team-usd", "unit": "usd", "algorithm": "fixed_window", "limit": "50.00/day", "calendar": "month"}]}`, admin)
		if r.status != http.StatusCreated || r.json(t)["id"] != "acme" {
			t.Fatalf("POST teams: %d %s", r.status, r.body)
		}
		r = e.post("/v1/admin/keys", `{"name": "laptop", "team": "acme", "limits": [{"name": "rpm", "algorithm": "fixed_window", "limit": "2/min"}]}`, admin)
		created := r.json(t)
		id, _ := created["id"].(string)
		secret, _ := created["secret"].(string)
		if r.status != http.StatusCreated || id == "" || !strings.HasPrefix(secret, "tl-") {
			t.Fatalf("POST keys: %d %s", r.status, r.body)
		}
		if r := e.post("/v1/check", `{"descriptors": {"api_key": "`+secret+`"}}`); r.status != http.StatusOK {
			t.Fatalf("check with the key: %d %s", r.status, r.body)
		}
		r = e.do(http.MethodGet, "/v1/admin/keys/"+id+"/usage", "", admin)
		if r.status != http.StatusOK {
			t.Fatalf("usage: %d %s", r.status, r.body)
		}
		levels := map[string]string{}
		for _, l := range r.json(t)["limits"].([]any) {
			m := l.(map[string]any)
			levels[m["name"].(string)] = m["level"].(string) + " " + m["level_name"].(string)
			if _, err := time.Parse(time.RFC3339, m["reset"].(string)); err != nil {
				t.Errorf("usage of %s: reset %v", m["name"], err)
			}
			if m["name"] == "rpm" && (m["used"].(float64) != 1 || m["remaining"].(float64) != 1) {
				t.Errorf("usage of rpm: %v, want used 1, remaining 1", m)
			}
		}
		if levels["rpm"] != "key laptop" || levels["team-usd"] != "team acme" || levels["plan-pro-daily"] != "plan pro" || len(levels) != 3 {
			t.Errorf("usage levels %v", levels)
		}
		// If-Match: of two edits of one version, the second loses.
		r = e.do(http.MethodGet, "/v1/admin/keys/"+id, "", admin)
		tag := r.header.Get("ETag")
		if r.status != http.StatusOK || tag == "" || strings.Contains(r.body, secret) || strings.Contains(r.body, plane.Digest(secret)) {
			t.Fatalf("GET key: %d %s (ETag %q)", r.status, r.body, tag)
		}
		if r := e.do(http.MethodPut, "/v1/admin/keys/"+id, `{"name": "laptop 2", "team": "acme"}`, admin, "If-Match: "+tag); r.status != http.StatusOK {
			t.Fatalf("first edit: %d %s", r.status, r.body)
		}
		if r := e.do(http.MethodPut, "/v1/admin/keys/"+id, `{"name": "laptop 3", "team": "acme"}`, admin, "If-Match: "+tag); r.status != http.StatusPreconditionFailed {
			t.Fatalf("second edit of the same version: %d %s, want 412", r.status, r.body)
		}
		if r := e.do(http.MethodDelete, "/v1/admin/keys/"+id, "", admin); r.status != http.StatusNoContent {
			t.Fatalf("DELETE: %d %s", r.status, r.body)
		}
		if r := e.post("/v1/check", `{"descriptors": {"api_key": "`+secret+`"}}`); r.status != http.StatusUnauthorized {
			t.Fatalf("check with a revoked key: %d %s, want 401", r.status, r.body)
		}
		if r := e.do(http.MethodGet, "/v1/admin/keys", "", "Authorization: Bearer wrong"); r.status != http.StatusUnauthorized {
			t.Fatalf("a wrong admin token: %d", r.status)
		}
		out := logs.String()
		if strings.Contains(out, secret) || strings.Contains(out, secret[3:]) {
			t.Fatal("the log holds the secret")
		}
		for _, action := range []string{`"action":"create","kind":"team","id":"acme"`, `"action":"create","kind":"key"`, `"action":"update"`, `"action":"revoke"`} {
			if !strings.Contains(out, action) || !strings.Contains(out, `"who":"ops"`) {
				t.Errorf("no audit line %s by ops in\n%s", action, out)
			}
		}
	}
}

func TestPlaneAdminBadInput(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	e := newPlaneEnv(t, memBackend(), &logs)
	if r := e.post("/v1/admin/teams", `{"name": "acme"}`, admin); r.status != http.StatusCreated {
		t.Fatal(r.body)
	}
	long := strings.Repeat("x", 257)
	for _, c := range []struct{ body, field string }{
		{`{"name": "k", "colour": "red"}`, "colour"},
		{`{"name": "k", "limits": [{"name": "a", "algorithm": "fixed_window", "limit": "-5/min"}]}`, "limits[0].limit"},
		{`{"name": "k", "limits": [{"name": "a", "algorithm": "token_bucket", "capacity": "ten", "refill": "1/s"}]}`, "limits[0].capacity"},
		{`{"name": "k", "limits": [{"name": "a", "algorithm": "fixed_window", "limit": "5/min", "speed": 1}]}`, "limits[0].speed"},
		{`{"name": "k", "plan": "gold"}`, "plan"},
		{`{"name": "k", "team": "nope"}`, "team"},
		{`{"name": "k", "expires_at": "2000-01-01T00:00:00Z"}`, "expires_at"},
		{`{"name": "k", "labels": {"env": "` + long + `"}}`, "labels.env"},
		{`{"name": "k", "limits": 5}`, "limits"},
	} {
		r := e.post("/v1/admin/keys", c.body, admin)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", c.body, r.status, r.body)
			continue
		}
		if got := r.json(t)["error"].(map[string]any)["field"]; got != c.field {
			t.Errorf("%s: field %v, want %s (%s)", c.body, got, c.field, r.body)
		}
	}
	if r := e.do(http.MethodGet, "/v1/admin/keys", "", admin); r.status != http.StatusOK || strings.Contains(r.body, `"id"`) {
		t.Fatalf("after bad input, keys: %d %s, want none", r.status, r.body)
	}
	if r := e.post("/v1/admin/teams", `{"name": "acme"}`, admin); r.status != http.StatusConflict {
		t.Fatalf("a second team acme: %d %s, want 409", r.status, r.body)
	}
}

// TestPlaneLimitOverrides: a plane limit is given whole. One that gives a
// name and amounts but no algorithm (an override's shape) answers 400:
// naming limits[i].name when no level below has a limit of that name ("a
// limit name the plan does not know"), limits[i].algorithm when one has
// (the message names it); nothing is stored. A whole limit of a new name
// is added.
func TestPlaneLimitOverrides(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	e := newPlaneEnv(t, memBackend(), &logs)
	for _, c := range []struct {
		path, body, field, msg string
	}{
		{"/v1/admin/teams", `{"name": "acme", "plan": "pro", "limits": [{"name": "nope", "limit": "5/min"}]}`,
			"limits[0].name", `plan "pro" has no limit "nope" to override`},
		{"/v1/admin/teams", `{"name": "acme", "plan": "pro", "limits": [{"name": "a", "algorithm": "fixed_window", "limit": "5/min"}, {"name": "plan-pro-daily", "limit": "5/day"}]}`,
			"limits[1].algorithm", `replaces plan "pro"'s "plan-pro-daily" is given whole`},
		{"/v1/admin/teams", `{"name": "acme", "limits": [{"name": "plan-pro-daily", "limit": "5/day"}]}`,
			"limits[0].name", `the configuration has no limit "plan-pro-daily" to override`},
		{"/v1/admin/keys", `{"name": "k", "limits": [{"name": "rpm", "limit": "1/min"}]}`,
			"limits[0].algorithm", `replaces the configuration's "rpm"`},
	} {
		wantError(t, e.post(c.path, c.body, admin), http.StatusBadRequest, c.field, c.msg)
	}
	if r := e.do(http.MethodGet, "/v1/admin/teams/acme", "", admin); r.status != http.StatusNotFound {
		t.Fatalf("after bad input, team acme: %d %s, want 404", r.status, r.body)
	}
	// A whole limit of a new name is added; the team's limits are below
	// its keys'.
	if r := e.post("/v1/admin/teams", `{"name": "acme", "plan": "pro", "limits": [{"name": "team-rpm", "algorithm": "fixed_window", "limit": "50/min"}]}`, admin); r.status != http.StatusCreated {
		t.Fatalf("a team with a limit of a new name: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ body, field, msg string }{
		{`{"name": "k", "team": "acme", "limits": [{"name": "team-rpm", "limit": "1/min"}]}`,
			"limits[0].algorithm", `replaces team "acme"'s "team-rpm"`},
		{`{"name": "k", "team": "acme", "limits": [{"name": "x", "capacity": 5}]}`,
			"limits[0].name", `plan "pro" and team "acme" have no limit "x" to override`},
	} {
		wantError(t, e.post("/v1/admin/keys", c.body, admin), http.StatusBadRequest, c.field, c.msg)
	}
	if r := e.do(http.MethodGet, "/v1/admin/keys", "", admin); r.status != http.StatusOK || strings.Contains(r.body, `"id"`) {
		t.Fatalf("after bad input, keys: %d %s, want none", r.status, r.body)
	}
	r := e.post("/v1/admin/keys", `{"name": "k", "team": "acme", "limits": [{"name": "team-rpm", "algorithm": "fixed_window", "limit": "1/min"}, {"name": "own", "algorithm": "fixed_window", "limit": "9/min"}]}`, admin)
	if r.status != http.StatusCreated {
		t.Fatalf("a key replacing its team's limit and adding one: %d %s", r.status, r.body)
	}
	usage := e.do(http.MethodGet, "/v1/admin/keys/"+r.json(t)["id"].(string)+"/usage", "", admin)
	levels := map[string]string{}
	for _, l := range usage.json(t)["limits"].([]any) {
		m := l.(map[string]any)
		levels[m["name"].(string)] = fmt.Sprint(m["level"], " ", m["limit"])
	}
	want := map[string]string{"team-rpm": "key 1", "own": "key 9", "rpm": "plan 100", "plan-pro-daily": "plan 1000"}
	if !maps.Equal(levels, want) {
		t.Errorf("the key's limits %v, want %v", levels, want)
	}
}

// TestPlaneTeamUsage: a team's usage holds the budgets its keys share (the
// team's own limits), each charged by the calls of every key of the team,
// and not a limit keyed by api_key (each key's own).
func TestPlaneTeamUsage(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	e := newPlaneEnv(t, memBackend(), &logs)
	if r := e.post("/v1/admin/teams", `{"name": "acme", "limits": [{"name": "team-calls", "algorithm": "fixed_window", "limit": "10/min"}]}`, admin); r.status != http.StatusCreated {
		t.Fatalf("POST teams: %d %s", r.status, r.body)
	}
	for _, name := range []string{"one", "two"} {
		r := e.post("/v1/admin/keys", `{"name": "`+name+`", "team": "acme"}`, admin)
		secret, _ := r.json(t)["secret"].(string)
		if r.status != http.StatusCreated || secret == "" {
			t.Fatalf("POST keys: %d %s", r.status, r.body)
		}
		if r := e.post("/v1/check", `{"descriptors": {"api_key": "`+secret+`"}}`); r.status != http.StatusOK {
			t.Fatalf("check with key %s: %d %s", name, r.status, r.body)
		}
	}
	r := e.do(http.MethodGet, "/v1/admin/teams/acme/usage", "", admin)
	if r.status != http.StatusOK {
		t.Fatalf("team usage: %d %s", r.status, r.body)
	}
	var got []string
	for _, l := range r.json(t)["limits"].([]any) {
		m := l.(map[string]any)
		got = append(got, fmt.Sprintf("%s %s/%s used %v of %v", m["name"], m["level"], m["level_name"], m["used"], m["limit"]))
	}
	if want := []string{"team-calls team/acme used 2 of 10"}; !slices.Equal(got, want) {
		t.Errorf("team usage %q, want %q", got, want)
	}
	if r := e.do(http.MethodGet, "/v1/admin/teams/nope/usage", "", admin); r.status != http.StatusNotFound {
		t.Errorf("usage of no team: %d %s, want 404", r.status, r.body)
	}
	if r := e.do(http.MethodGet, "/v1/admin/teams/acme/usage", ""); r.status != http.StatusUnauthorized {
		t.Errorf("usage without the admin token: %d, want 401", r.status)
	}
}

// TestPlaneDenialNamesLevel: a denial's body names the limit that denied,
// its level (key, team, plan) and that level's name, and when it passes.
func TestPlaneDenialNamesLevel(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, b := range []backend{memBackend(), redisBackend(srv)} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			var logs testkit.Buffer
			e := newPlaneEnv(t, b, &logs)
			if r := e.post("/v1/admin/teams", `{"name": "acme", "plan": "pro", "limits": [{"name": "team-rpm", "algorithm": "fixed_window", "limit": "3/min"}]}`, admin); r.status != http.StatusCreated {
				t.Fatalf("POST teams: %d %s", r.status, r.body)
			}
			secret := func(spec string) string {
				r := e.post("/v1/admin/keys", spec, admin)
				if r.status != http.StatusCreated {
					t.Fatalf("POST keys: %d %s", r.status, r.body)
				}
				return r.json(t)["secret"].(string)
			}
			laptop := secret(`{"name": "laptop", "team": "acme", "limits": [{"name": "rpm", "algorithm": "fixed_window", "limit": "1/min"}]}`)
			ci := secret(`{"name": "ci", "team": "acme"}`)
			check := func(secret string) decision {
				return decodeDecision(t, e.post("/v1/check", `{"descriptors": {"api_key": "`+secret+`"}}`))
			}
			denied := func(d decision) outcome {
				t.Helper()
				for _, o := range d.Limits {
					if !o.Allowed && !d.Allowed {
						return o
					}
				}
				t.Fatalf("%+v: want a denial", d)
				return outcome{}
			}
			if d := check(laptop); !d.Allowed {
				t.Fatalf("laptop's first call: %+v", d)
			}
			// The key's own rpm replaces the plan's rpm.
			if o := denied(check(laptop)); o.Name != "rpm" || o.Level != "key" || o.LevelName != "laptop" || o.Limit != 1 || o.RetryAfterMs != 60_000 {
				t.Errorf("laptop's second call denied by %+v, want the key laptop's rpm, passing in 60 s", o)
			}
			for i := range 2 {
				d := check(ci)
				if !d.Allowed {
					t.Fatalf("ci's call %d: %+v", i, d)
				}
				for _, o := range d.Limits {
					if want := map[string]string{"rpm": "plan pro", "team-rpm": "team acme", "plan-pro-daily": "plan pro"}[o.Name]; o.Level+" "+o.LevelName != want {
						t.Errorf("ci's %s at %s %q, want %s", o.Name, o.Level, o.LevelName, want)
					}
				}
			}
			if o := denied(check(ci)); o.Name != "team-rpm" || o.Level != "team" || o.LevelName != "acme" || o.RetryAfterMs != 60_000 {
				t.Errorf("ci's third call denied by %+v, want the team acme's team-rpm", o)
			}
		})
	}
}

// TestPlaneAuditNamesTheAdminToken: each change's audit line names the
// admin token it was made with, never the token; the reset of a budget
// too.
func TestPlaneAuditNamesTheAdminToken(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	var svc *service.Service
	p, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{
		KnownPlan: func(name string) bool { return svc.KnownPlan(name) }, Logger: testkit.Quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, memBackend(), setup{config: planeConfig, svc: func(o *service.Options) { o.Plane = p },
		opts: httpapi.Options{AdminTokens: map[string]string{"alice": "tok-alice", "ci-bot": "tok-ci"}, Plane: p, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}})
	svc = e.svc
	if r := e.post("/v1/admin/teams", `{"name": "acme"}`, "Authorization: Bearer tok-alice"); r.status != http.StatusCreated {
		t.Fatalf("POST teams as alice: %d %s", r.status, r.body)
	}
	if r := e.post("/v1/admin/keys", `{"name": "k", "team": "acme"}`, "Authorization: Bearer tok-ci"); r.status != http.StatusCreated {
		t.Fatalf("POST keys as ci-bot: %d %s", r.status, r.body)
	}
	if r := e.post("/v1/admin/reset", `{"descriptors": {"api_key": "sk-x"}}`, "Authorization: Bearer tok-ci"); r.status != http.StatusOK {
		t.Fatalf("reset as ci-bot: %d %s", r.status, r.body)
	}
	if r := e.post("/v1/admin/teams", `{"name": "other"}`, "Authorization: Bearer tok-nobody"); r.status != http.StatusUnauthorized {
		t.Fatalf("POST teams with no admin token of ours: %d, want 401", r.status)
	}
	out := logs.String()
	for _, want := range []string{`"who":"alice","action":"create","kind":"team","id":"acme"`, `"who":"ci-bot","action":"create","kind":"key"`, `"msg":"admin reset","who":"ci-bot"`} {
		if !strings.Contains(out, want) {
			t.Errorf("no audit line with %s in\n%s", want, out)
		}
	}
	if strings.Contains(out, "tok-") {
		t.Errorf("the log holds an admin token:\n%s", out)
	}
}

// TestPlaneBadInputChangesNothing: bad input to every write of teams and
// keys (create, update, rotate) is a 400 naming the field, and leaves
// what is stored as it was: no record created, none changed, no secret
// replaced.
func TestPlaneBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	e := newPlaneEnv(t, memBackend(), &logs)
	if r := e.post("/v1/admin/teams", `{"name": "acme", "plan": "pro"}`, admin); r.status != http.StatusCreated {
		t.Fatal(r.body)
	}
	r := e.post("/v1/admin/keys", `{"name": "k", "team": "acme", "labels": {"env": "`+strings.Repeat("x", plane.MaxLabelBytes)+`"}}`, admin)
	if r.status != http.StatusCreated {
		t.Fatalf("a key with a label of %d bytes: %d %s, want 201", plane.MaxLabelBytes, r.status, r.body)
	}
	id, secret := r.json(t)["id"].(string), r.json(t)["secret"].(string)
	snapshot := func() string {
		t.Helper()
		var out []string
		for _, path := range []string{"/v1/admin/teams", "/v1/admin/keys"} {
			r := e.do(http.MethodGet, path, "", admin)
			if r.status != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, r.status, r.body)
			}
			out = append(out, r.body)
		}
		return strings.Join(out, "\n")
	}
	before := snapshot()

	long := strings.Repeat("x", plane.MaxLabelBytes+1)
	negative := `{"name": "a", "algorithm": "fixed_window", "limit": "-5/min"}`
	for _, c := range []struct{ method, path, body, field string }{
		{http.MethodPost, "/v1/admin/teams", `{"name": "t2", "colour": "red"}`, "colour"},
		{http.MethodPost, "/v1/admin/teams", `{"name": "t2", "limits": [` + negative + `]}`, "limits[0].limit"},
		{http.MethodPost, "/v1/admin/teams", `{"name": "t2", "limits": [{"name": "a", "algorithm": "token_bucket", "capacity": "ten", "refill": "1/s"}]}`, "limits[0].capacity"},
		{http.MethodPost, "/v1/admin/teams", `{"name": "t2", "limits": [{"name": "a", "algorithm": "token_bucket", "capacity": -1, "refill": "1/s"}]}`, "limits[0].capacity"},
		{http.MethodPost, "/v1/admin/teams", `{"name": "t2", "plan": "gold"}`, "plan"},
		{http.MethodPost, "/v1/admin/teams", `{"name": "t2", "team": "acme"}`, "team"},
		{http.MethodPost, "/v1/admin/teams", `{"name": "t2", "expires_at": "2000-01-01T00:00:00Z"}`, "expires_at"},
		{http.MethodPost, "/v1/admin/teams", `{"name": "t2", "labels": {"env": "` + long + `"}}`, "labels.env"},
		{http.MethodPost, "/v1/admin/teams", `{"name": "Not A Name"}`, "name"},
		{http.MethodPut, "/v1/admin/teams/acme", `{"plan": "pro", "colour": "red"}`, "colour"},
		{http.MethodPut, "/v1/admin/teams/acme", `{"plan": "gold"}`, "plan"},
		{http.MethodPut, "/v1/admin/teams/acme", `{"limits": [` + negative + `]}`, "limits[0].limit"},
		{http.MethodPut, "/v1/admin/keys/" + id, `{"name": "k", "team": "acme", "speed": 1}`, "speed"},
		{http.MethodPut, "/v1/admin/keys/" + id, `{"name": "k", "team": "nope"}`, "team"},
		{http.MethodPut, "/v1/admin/keys/" + id, `{"name": "k", "team": "acme", "expires_at": "2000-01-01T00:00:00Z"}`, "expires_at"},
		{http.MethodPut, "/v1/admin/keys/" + id, `{"name": "k", "team": "acme", "labels": {"env": "` + long + `"}}`, "labels.env"},
		{http.MethodPut, "/v1/admin/keys/" + id, `{"name": "k", "team": "acme", "limits": [` + negative + `]}`, "limits[0].limit"},
		{http.MethodPut, "/v1/admin/keys/" + id, `{"name": "k", "team": "acme"}`, ""}, // If-Match below: not a number
		{http.MethodPost, "/v1/admin/keys/" + id + "/rotate", `{"grace": "forever"}`, "grace"},
		{http.MethodPost, "/v1/admin/keys/" + id + "/rotate", `{"grace": "-1h"}`, "grace"},
		{http.MethodPost, "/v1/admin/keys/" + id + "/rotate", `{"grace": "1h", "keep": true}`, "keep"},
	} {
		headers := []string{admin}
		want := c.field
		if want == "" {
			headers, want = append(headers, "If-Match: yesterday"), "If-Match"
		}
		r := e.do(c.method, c.path, c.body, headers...)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s %s %s: %d %s, want 400", c.method, c.path, c.body, r.status, r.body)
			continue
		}
		if got := r.json(t)["error"].(map[string]any)["field"]; got != want {
			t.Errorf("%s %s %s: field %v, want %s (%s)", c.method, c.path, c.body, got, want, r.body)
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("bad input changed the plane from\n%s\nto\n%s", before, after)
	}
	if r := e.post("/v1/check", `{"descriptors": {"api_key": "`+secret+`"}}`); r.status != http.StatusOK {
		t.Errorf("the key's secret after bad input: %d %s, want 200", r.status, r.body)
	}
	if n := strings.Count(logs.String(), `"msg":"plane change"`); n != 2 {
		t.Errorf("%d changes logged, want the team's and the key's creation only:\n%s", n, logs.String())
	}
}

// TestPlaneAuditLinePerChange: each change of a team or key (create,
// update, rotate, revoke, delete) is one audit line saying who (the admin
// token's name), what, which record, its version and when; refused
// writes are no change and log none; no line holds a secret, a digest or
// an admin token.
func TestPlaneAuditLinePerChange(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	var svc *service.Service
	p, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{
		KnownPlan: func(name string) bool { return svc.KnownPlan(name) }, Logger: testkit.Quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, memBackend(), setup{config: planeConfig, svc: func(o *service.Options) { o.Plane = p },
		opts: httpapi.Options{AdminTokens: map[string]string{"alice": "tok-alice", "bob": "tok-bob"}, Plane: p, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}})
	svc = e.svc
	alice, bob := "Authorization: Bearer tok-alice", "Authorization: Bearer tok-bob"
	type change struct{ who, action, kind, id, etag string }
	var want []change
	write := func(who, method, path, body string, status int, headers ...string) response {
		t.Helper()
		r := e.do(method, path, body, append([]string{map[string]string{"alice": alice, "bob": bob}[who]}, headers...)...)
		if r.status != status {
			t.Fatalf("%s %s as %s: %d %s, want %d", method, path, who, r.status, r.body, status)
		}
		return r
	}
	write("alice", http.MethodPost, "/v1/admin/teams", `{"name": "acme"}`, http.StatusCreated)
	want = append(want, change{"alice", "create", "team", "acme", "1"})
	write("bob", http.MethodPut, "/v1/admin/teams/acme", `{"plan": "pro"}`, http.StatusOK, `If-Match: "1"`)
	want = append(want, change{"bob", "update", "team", "acme", "2"})
	r := write("alice", http.MethodPost, "/v1/admin/keys", `{"name": "k", "team": "acme"}`, http.StatusCreated)
	id, secrets := r.json(t)["id"].(string), []string{r.json(t)["secret"].(string)}
	want = append(want, change{"alice", "create", "key", id, "3"})
	write("bob", http.MethodPut, "/v1/admin/keys/"+id, `{"name": "k2", "team": "acme"}`, http.StatusOK)
	want = append(want, change{"bob", "update", "key", id, "4"})
	r = write("alice", http.MethodPost, "/v1/admin/keys/"+id+"/rotate", `{"grace": "1h"}`, http.StatusOK)
	secrets = append(secrets, r.json(t)["secret"].(string))
	want = append(want, change{"alice", "rotate", "key", id, "5"})
	// Refused: a stale If-Match, bad input, a duplicate, no such key.
	write("bob", http.MethodPut, "/v1/admin/keys/"+id, `{"name": "k3"}`, http.StatusPreconditionFailed, `If-Match: "3"`)
	write("bob", http.MethodPost, "/v1/admin/keys", `{"name": "k", "team": "nope"}`, http.StatusBadRequest)
	write("bob", http.MethodPost, "/v1/admin/teams", `{"name": "acme"}`, http.StatusConflict)
	write("bob", http.MethodDelete, "/v1/admin/keys/key_000000000000000000000000", "", http.StatusNotFound)
	write("bob", http.MethodDelete, "/v1/admin/teams/acme", "", http.StatusConflict)
	write("bob", http.MethodDelete, "/v1/admin/keys/"+id, "", http.StatusNoContent, `If-Match: "5"`)
	want = append(want, change{"bob", "revoke", "key", id, "0"})
	write("alice", http.MethodDelete, "/v1/admin/teams/acme", "", http.StatusNoContent)
	want = append(want, change{"alice", "delete", "team", "acme", "0"})

	var got []change
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Time                       time.Time
			Msg, Who, Action, Kind, ID string
			Version                    int64
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Msg != "plane change" {
			continue
		}
		if rec.Time.IsZero() || time.Since(rec.Time) > time.Minute {
			t.Errorf("audit line %s: time %v, want when the change was made", line, rec.Time)
		}
		got = append(got, change{rec.Who, rec.Action, rec.Kind, rec.ID, strconv.FormatInt(rec.Version, 10)})
	}
	if !slices.Equal(got, want) {
		t.Errorf("audit lines\n%v\nwant one per change\n%v", got, want)
	}
	out := logs.String()
	for _, s := range append(secrets, "tok-alice", "tok-bob") {
		if strings.Contains(out, s) || strings.Contains(out, strings.TrimPrefix(s, "tl-")) || strings.Contains(out, plane.Digest(s)) {
			t.Errorf("the log holds a secret, its digest or an admin token:\n%s", out)
		}
	}
}

// TestPlaneListFilters: GET /v1/admin/keys with plan= and disabled= (alone,
// together, with team=) walks, page by page through next, exactly the keys
// that match, in id order, each once; a disabled= that is not a boolean is
// a 400 naming it.
func TestPlaneListFilters(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	e := newPlaneEnv(t, memBackend(), &logs)
	if r := e.post("/v1/admin/teams", `{"name": "acme", "plan": "pro"}`, admin); r.status != http.StatusCreated {
		t.Fatal(r.body)
	}
	type key struct {
		id, plan, team string
		disabled       bool
	}
	var keys []key
	for i := range 13 {
		k := key{plan: []string{"pro", "", "pro"}[i%3], disabled: i%4 == 1}
		if i%5 == 0 {
			k.team = "acme"
		}
		body := fmt.Sprintf(`{"name": "k%d", "plan": %q, "team": %q, "disabled": %t}`, i, k.plan, k.team, k.disabled)
		r := e.post("/v1/admin/keys", body, admin)
		if r.status != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", body, r.status, r.body)
		}
		k.id = r.json(t)["id"].(string)
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int { return strings.Compare(a.id, b.id) })
	for _, c := range []struct {
		query string
		want  func(key) bool
	}{
		{"plan=pro", func(k key) bool { return k.plan == "pro" }},
		{"disabled=true", func(k key) bool { return k.disabled }},
		{"disabled=false", func(k key) bool { return !k.disabled }},
		{"plan=pro&disabled=false", func(k key) bool { return k.plan == "pro" && !k.disabled }},
		{"team=acme&disabled=false", func(k key) bool { return k.team == "acme" && !k.disabled }},
		{"plan=free", func(key) bool { return false }},
	} {
		var want, got []string
		for _, k := range keys {
			if c.want(k) {
				want = append(want, k.id)
			}
		}
		after, pages := "", 0
		for {
			r := e.do(http.MethodGet, "/v1/admin/keys?limit=2&"+c.query+"&after="+after, "", admin)
			if r.status != http.StatusOK {
				t.Fatalf("GET ?%s after %q: %d %s", c.query, after, r.status, r.body)
			}
			var page struct {
				Keys []struct {
					ID string `json:"id"`
				} `json:"keys"`
				Next string `json:"next"`
			}
			if err := json.Unmarshal([]byte(r.body), &page); err != nil {
				t.Fatal(err)
			}
			if len(page.Keys) > 2 {
				t.Fatalf("GET ?%s: a page of %d keys, want at most 2", c.query, len(page.Keys))
			}
			for _, k := range page.Keys {
				got = append(got, k.ID)
			}
			if pages++; page.Next == "" || pages > len(keys) {
				break
			}
			after = page.Next
		}
		if !slices.Equal(got, want) {
			t.Errorf("GET ?%s pages through %v, want %v", c.query, got, want)
		}
	}
	wantError(t, e.do(http.MethodGet, "/v1/admin/keys?disabled=maybe", "", admin), http.StatusBadRequest, "disabled", `want true or false, got "maybe"`)
}
