package httpapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
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
