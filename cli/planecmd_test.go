package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	serveArgs := func() []string {
		return []string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-token", "secret", "--data-dir", t.TempDir()}
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
	var ee *exitError
	if _, err := tl(t, base, "keys", "show", k1.ID); !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), "404") {
		t.Errorf("keys show of a revoked key: %v, want exit status %d naming 404", err, ExitUsage)
	}
	// Bad input: the server's reason, naming the field, and exit status 2.
	if _, err := tl(t, base, "teams", "create", "bad", "--limits", `[{"name": "x", "algorithm": "fixed_window", "limit": "-5/min"}]`); !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), "limits[0]") {
		t.Errorf("teams create with a negative limit: %v, want exit status %d naming limits[0]", err, ExitUsage)
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
