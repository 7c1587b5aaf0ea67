package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// tl runs a tokenlimit command line in this process against base, with
// the admin token, and returns what it printed.
func tl(t *testing.T, base string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(context.Background(), append(args, "--server", base, "--admin-token", "secret"), &out, &errOut)
	if errOut.Len() > 0 {
		t.Logf("%v: stderr: %s", args, errOut.String())
	}
	return out.String(), err
}

// tlJSON runs a command that must succeed and decodes its output into v.
func tlJSON(t *testing.T, base string, v any, args ...string) {
	t.Helper()
	out, err := tl(t, base, args...)
	if err != nil {
		t.Fatalf("tokenlimit %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("tokenlimit %s printed %q: %v", strings.Join(args, " "), out, err)
	}
}

type cliKey struct {
	ID, Name, Team, Secret string
	Labels                 map[string]string
	Version                int64
}

// TestPlaneCommands drives teams and keys through a real serve process,
// exports them and imports them into another.
func TestPlaneCommands(t *testing.T) {
	t.Parallel()
	// The server's admin tokens from a file of named ones.
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	if err := os.WriteFile(tokens, []byte("# the plane's admins\nops:secret\nci:other-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	serveArgs := func() []string {
		return []string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-token", "@" + tokens, "--data-dir", t.TempDir()}
	}
	_, base := child(t, serveArgs()...)

	var team struct{ ID, Name string }
	tlJSON(t, base, &team, "teams", "create", "acme", "--label", "env=prod", "--limits", `[{"name": "team-rpm", "algorithm": "fixed_window", "limit": "100/min"}]`)
	if team.ID == "" || team.Name != "acme" {
		t.Fatalf("teams create: %+v", team)
	}
	var k1, k2 cliKey
	tlJSON(t, base, &k1, "keys", "create", "k1", "--team", "acme")
	tlJSON(t, base, &k2, "keys", "create", "k2", "--team", "acme", "--label", "tier=free")
	if !strings.HasPrefix(k1.Secret, "tl-") || k1.Team != "acme" || k2.Secret == "" || k2.Secret == k1.Secret {
		t.Fatalf("keys create: %+v %+v", k1, k2)
	}
	if code, _ := call(t, http.MethodPost, base+"/v1/check", `{"descriptors": {"api_key": "`+k1.Secret+`"}}`); code != http.StatusOK {
		t.Fatalf("a check with k1's secret: %d, want 200", code)
	}

	// explain: a table of every level's limits, the team's charged once.
	out, err := tl(t, base, "explain", k1.ID)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	if !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
		f := strings.Fields(line)
		return len(f) == 8 && f[0] == "team" && f[1] == "acme" && f[2] == "team-rpm" && f[4] == "1" && f[5] == "100" && f[6] == "99"
	}) || !strings.HasPrefix(out, "LEVEL ") {
		t.Errorf("explain %s printed\n%s\nwant a line: team acme team-rpm, used 1 of 100, 99 remaining", k1.ID, out)
	}
	var ee *exitError
	if _, err := tl(t, base, "explain", "key_000000000000000000000000"); !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), "404") {
		t.Errorf("explain of no key: %v, want exit status %d naming 404", err, ExitUsage)
	}

	var listed []cliKey
	tlJSON(t, base, &listed, "keys", "list", "--team", "acme")
	if len(listed) != 2 || listed[0].Secret != "" || listed[1].Secret != "" {
		t.Errorf("keys list --team acme: %+v, want both keys without secrets", listed)
	}
	tlJSON(t, base, &listed, "keys", "list", "--label", "tier=free")
	if len(listed) != 1 || listed[0].ID != k2.ID {
		t.Errorf("keys list --label tier=free: %+v, want k2 alone", listed)
	}

	var usage struct {
		Limits []struct{ Level, Name string }
	}
	tlJSON(t, base, &usage, "keys", "show", k1.ID, "--usage")
	if !strings.Contains(strings.ToLower(strings.Join(func() []string {
		var s []string
		for _, l := range usage.Limits {
			s = append(s, l.Level+"/"+l.Name)
		}
		return s
	}(), " ")), "team/team-rpm") {
		t.Errorf("keys show --usage: %+v, want the team's team-rpm", usage.Limits)
	}

	// update changes what its flags name and keeps the rest.
	var updated cliKey
	tlJSON(t, base, &updated, "keys", "update", k2.ID, "--label", "tier=gold")
	if updated.Name != "k2" || updated.Team != "acme" || updated.Labels["tier"] != "gold" || updated.Version <= k2.Version {
		t.Errorf("keys update --label tier=gold: %+v", updated)
	}

	var rotated cliKey
	tlJSON(t, base, &rotated, "keys", "rotate", k2.ID, "--grace", "1m")
	if rotated.Secret == "" || rotated.Secret == k2.Secret {
		t.Errorf("keys rotate: %+v, want a new secret", rotated)
	}

	export, err := tl(t, base, "keys", "export")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{k1.Secret, k2.Secret, rotated.Secret} {
		if strings.Contains(export, s) || strings.Contains(export, strings.TrimPrefix(s, "tl-")) {
			t.Fatal("keys export printed a secret")
		}
	}

	if out, err := tl(t, base, "keys", "revoke", k1.ID); err != nil || !strings.Contains(out, "revoke "+k1.ID) {
		t.Fatalf("keys revoke: %q %v", out, err)
	}
	if code, _ := call(t, http.MethodPost, base+"/v1/check", `{"descriptors": {"api_key": "`+k1.Secret+`"}}`); code != http.StatusUnauthorized {
		t.Errorf("a check with the revoked key: %d, want 401", code)
	}
	if _, err := tl(t, base, "keys", "show", k1.ID); !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), "404") {
		t.Errorf("keys show of a revoked key: %v, want exit status %d naming 404", err, ExitUsage)
	}
	// Bad input: the server's reason, naming the field, and exit status 2.
	if _, err := tl(t, base, "teams", "create", "bad", "--limits", `[{"name": "x", "algorithm": "fixed_window", "limit": "-5/min"}]`); !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), "limits[0]") {
		t.Errorf("teams create with a negative limit: %v, want exit status %d naming limits[0]", err, ExitUsage)
	}
	// teams show and delete.
	var shown struct{ ID, Name string }
	tlJSON(t, base, &shown, "teams", "show", "acme")
	if shown.ID != "acme" {
		t.Errorf("teams show acme: %+v", shown)
	}
	tlJSON(t, base, &shown, "teams", "create", "tmp")
	if out, err := tl(t, base, "teams", "delete", "tmp"); err != nil || !strings.Contains(out, "delete tmp") {
		t.Errorf("teams delete tmp: %q %v", out, err)
	}
	if _, err := tl(t, base, "teams", "show", "tmp"); !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), "404") {
		t.Errorf("teams show of a deleted team: %v, want exit status %d naming 404", err, ExitUsage)
	}
	if _, err := tl(t, base, "teams", "delete", "acme"); !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), "409") {
		t.Errorf("teams delete of a team with keys: %v, want exit status %d naming 409", err, ExitUsage)
	}
	// A client takes NAME:TOKEN as well, and sends the token.
	if err := Run(context.Background(), []string{"teams", "list", "--server", base, "--admin-token", "ci:other-secret"}, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Errorf("teams list with --admin-token ci:other-secret: %v", err)
	}
	err = Run(context.Background(), []string{"teams", "list", "--server", base, "--admin-token", "wrong"}, &bytes.Buffer{}, &bytes.Buffer{})
	if !errors.As(err, &ee) || ee.code != ExitUsage {
		t.Errorf("teams list with a wrong admin token: %v, want exit status %d", err, ExitUsage)
	}

	// Import into a fresh server: the team and both keys, with new secrets.
	file := filepath.Join(t.TempDir(), "export.json")
	if err := os.WriteFile(file, []byte(export), 0o600); err != nil {
		t.Fatal(err)
	}
	_, other := child(t, serveArgs()...)
	var imported struct {
		Teams       int      `json:"teams_created"`
		KeysCreated []cliKey `json:"keys_created"`
	}
	tlJSON(t, other, &imported, "keys", "import", file)
	if imported.Teams != 1 || len(imported.KeysCreated) != 2 {
		t.Fatalf("keys import: %+v, want 1 team and 2 keys", imported)
	}
	for _, k := range imported.KeysCreated {
		if code, _ := call(t, http.MethodPost, other+"/v1/check", `{"descriptors": {"api_key": "`+k.Secret+`"}}`); code != http.StatusOK {
			t.Errorf("imported key %s's new secret: check %d, want 200", k.Name, code)
		}
	}
	tlJSON(t, other, &listed, "keys", "list", "--team", "acme")
	if len(listed) != 2 {
		t.Errorf("after import the other server lists %+v, want 2 keys of acme", listed)
	}
	// A second import skips what exists.
	tlJSON(t, other, &imported, "keys", "import", file)
	if imported.Teams != 0 || len(imported.KeysCreated) != 0 {
		t.Errorf("a second import created %+v, want nothing", imported.KeysCreated)
	}
}

// TestExplainTable: explain's table lists the key's limits first, then its
// team's, then its plan's, dollars as dollars.
func TestExplainTable(t *testing.T) {
	t.Parallel()
	reset := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	u := keyUsage{ID: "key_1", Limits: []keyUsageLimit{
		{Level: "plan", Name: "rpm", Unit: "requests", Limit: 60, Used: 2, Remaining: 58, Reset: reset},
		{Level: "team", LevelName: "acme", Name: "usd-monthly", Unit: "usd", Limit: 50_000_000, Used: 50_000_000, Reset: reset},
		{Level: "key", LevelName: "ci bot", Name: "tpm", Unit: "tokens", Limit: 1000, Used: 10, Remaining: 990, Reset: reset},
	}}
	var out bytes.Buffer
	if err := u.print(&out); err != nil {
		t.Fatal(err)
	}
	want := `LEVEL  NAME    LIMIT        UNIT      USED    OF      REMAINING  RESET
key    ci bot  tpm          tokens    10      1000    990        2027-01-01T00:00:00Z
team   acme    usd-monthly  usd       $50.00  $50.00  $0.00      2027-01-01T00:00:00Z
plan   -       rpm          requests  2       60      58         2027-01-01T00:00:00Z
`
	if out.String() != want {
		t.Errorf("explain printed\n%s\nwant\n%s", out.String(), want)
	}
}

// TestPlaneUpdateNeverOverwritesAConcurrentEdit: keys update and teams
// update read the record and write it back under If-Match; an edit made
// through the API between the two (here by a relay in front of a real
// serve, right after forwarding the command's read) makes the command
// fail with exit status 2, and that edit stands.
func TestPlaneUpdateNeverOverwritesAConcurrentEdit(t *testing.T) {
	t.Parallel()
	_, base := child(t, "serve", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-token", "secret")
	target, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	// edits maps a record's path to the edit made once the command has
	// read it.
	var mu sync.Mutex
	edits := map[string]string{}
	relay := httputil.NewSingleHostReverseProxy(target)
	relay.ModifyResponse = func(res *http.Response) error {
		mu.Lock()
		edit, ok := edits[res.Request.URL.Path]
		delete(edits, res.Request.URL.Path)
		mu.Unlock()
		if ok && res.Request.Method == http.MethodGet {
			if code, body := call(t, http.MethodPut, base+res.Request.URL.Path, edit); code != http.StatusOK {
				return fmt.Errorf("the concurrent edit: %d %v", code, body)
			}
		}
		return nil
	}
	front := httptest.NewServer(relay)
	defer front.Close()

	if code, body := call(t, http.MethodPost, base+"/v1/admin/teams", `{"name": "acme"}`); code != http.StatusCreated {
		t.Fatalf("POST teams: %d %v", code, body)
	}
	code, k := call(t, http.MethodPost, base+"/v1/admin/keys", `{"name": "k", "team": "acme"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST keys: %d %v", code, k)
	}
	id := k["id"].(string)
	for _, c := range []struct{ kind, path, edit string }{
		{"keys", "/v1/admin/keys/" + id, `{"name": "k", "team": "acme", "labels": {"owner": "api"}}`},
		{"teams", "/v1/admin/teams/acme", `{"labels": {"owner": "api"}}`},
	} {
		mu.Lock()
		edits[c.path] = c.edit
		mu.Unlock()
		id := c.path[strings.LastIndex(c.path, "/")+1:]
		_, err := tl(t, front.URL, c.kind, "update", id, "--label", "owner=cli")
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), "nothing was written") {
			t.Errorf("%s update racing an edit: %v, want exit status %d saying nothing was written", c.kind, err, ExitUsage)
		}
		code, rec := call(t, http.MethodGet, base+c.path, "")
		if labels, _ := rec["labels"].(map[string]any); code != http.StatusOK || labels["owner"] != "api" {
			t.Errorf("after %s update lost the race the record is %d %v, want the API's edit (owner=api)", c.kind, code, rec)
		}
	}
}
