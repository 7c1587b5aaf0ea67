package httpx

import (
	"errors"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAdminGateNamesTheToken: of several admin tokens, the one a request
// carries lets it in, and the handler learns that token's name.
func TestAdminGateNamesTheToken(t *testing.T) {
	t.Parallel()
	g := NewAdminGate(map[string]string{"alice": "tok-a", "bob": "tok-b", "off": ""}, false, nil)
	var who string
	h := g.Wrap("the admin endpoints", func(w http.ResponseWriter, r *http.Request) { who = AdminName(r.Context()) })
	for _, c := range []struct{ bearer, who string }{{"tok-a", "alice"}, {"tok-b", "bob"}, {"", ""}, {"tok-c", ""}} {
		who = ""
		r := httptest.NewRequest(http.MethodPost, "/admin", nil)
		r.RemoteAddr = "127.0.0.1:1"
		r.Header.Set("Authorization", "Bearer "+c.bearer)
		w := httptest.NewRecorder()
		h(w, r)
		if who != c.who || (w.Code == http.StatusOK) != (c.who != "") {
			t.Errorf("Bearer %q: %d, name %q; want %q", c.bearer, w.Code, who, c.who)
		}
	}
	if AdminName(httptest.NewRequest(http.MethodGet, "/", nil).Context()) != "" {
		t.Error("a request that passed no gate has an admin name")
	}
}

func TestParseAdminTokens(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"ok":       "# who may change the plane\nalice:tok-a\n\n  bob:tok:b  \r\n",
		"bad-name": "alice:tok-a\nAlice Smith:tok-secret\n",
		"dup-name": "alice:tok-a\nalice:tok-b\n",
		"dup-tok":  "alice:tok-a\nbob:tok-a\n",
		"empty":    "alice:\n",
		"none":     "# nothing\n",
	}
	read := func(name string) ([]byte, error) {
		if s, ok := files[name]; ok {
			return []byte(s), nil
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	for _, c := range []struct {
		value string
		want  map[string]string
		err   string
	}{
		{"", nil, ""},
		{"s3cret", map[string]string{"admin": "s3cret"}, ""},
		{"ops:s3cret", map[string]string{"ops": "s3cret"}, ""},
		{"Not A Name:s3cret", map[string]string{"admin": "Not A Name:s3cret"}, ""},
		{"ops:", nil, "empty token"},
		{"@ok", map[string]string{"alice": "tok-a", "bob": "tok:b"}, ""},
		{"@bad-name", nil, "bad-name:2: want NAME:TOKEN"},
		{"@dup-name", nil, `dup-name:2: a second token named "alice"`},
		{"@dup-tok", nil, `dup-tok:2: "bob" has the token of "alice"`},
		{"@empty", nil, `empty:1: the token of "alice" is empty`},
		{"@none", nil, "none holds no NAME:TOKEN line"},
		{"@missing", nil, "missing"},
	} {
		got, err := ParseAdminTokens(c.value, read)
		switch {
		case c.err == "" && (err != nil || !maps.Equal(got, c.want)):
			t.Errorf("%q: %v, %v; want %v", c.value, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.HasPrefix(err.Error(), "--admin-token: ")):
			t.Errorf("%q: %v, %v; want an error naming --admin-token and %q", c.value, got, err, c.err)
		case err != nil && strings.Contains(err.Error(), "tok-"):
			t.Errorf("%q: the error %q shows a token", c.value, err)
		}
	}
	if _, err := ParseAdminTokens("@missing", read); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist wrapped", err)
	}
}

func TestAdminBearer(t *testing.T) {
	t.Parallel()
	for value, want := range map[string]string{"": "", "s3cret": "s3cret", "ops:s3cret": "s3cret", "Not A Name:x": "Not A Name:x"} {
		if got, err := AdminBearer(value); err != nil || got != want {
			t.Errorf("AdminBearer(%q) = %q, %v; want %q", value, got, err, want)
		}
	}
	if _, err := AdminBearer("@tokens"); err == nil || !strings.Contains(err.Error(), "@FILE") {
		t.Errorf("AdminBearer(@tokens): %v, want an error: a client sends one token", err)
	}
}

func TestWithAdminToken(t *testing.T) {
	t.Parallel()
	named := map[string]string{"ci": "tok-c"}
	got, err := WithAdminToken(named, "", "tok-a")
	if err != nil || !maps.Equal(got, map[string]string{"ci": "tok-c", "admin": "tok-a"}) || len(named) != 1 {
		t.Errorf("WithAdminToken: %v, %v (the map given: %v)", got, err, named)
	}
	if got, err := WithAdminToken(named, "ci", ""); err != nil || !maps.Equal(got, named) {
		t.Errorf("no token: %v, %v; want the map as given", got, err)
	}
	if _, err := WithAdminToken(named, "ci", "tok-x"); err == nil || !strings.Contains(err.Error(), `"ci"`) {
		t.Errorf("a name taken twice: %v, want an error naming it", err)
	}
}
