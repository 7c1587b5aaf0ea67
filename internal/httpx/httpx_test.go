package httpx

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// answer runs h on a request and decodes its error body.
func answer(t *testing.T, h http.HandlerFunc, r *http.Request) (int, Error, http.Header) {
	t.Helper()
	w := httptest.NewRecorder()
	h(w, r)
	var body struct{ Error Error }
	if w.Code != http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("status %d, body %q: %v", w.Code, w.Body, err)
		}
	}
	return w.Code, body.Error, w.Header()
}

func TestAdminGate(t *testing.T) {
	t.Parallel()
	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }
	req := func(remote, auth string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/admin", nil)
		r.RemoteAddr = remote
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		return r
	}
	for _, tt := range []struct {
		name      string
		gate      *AdminGate
		remote    string
		auth      string
		status    int
		field     string
		challenge bool
	}{
		{"no token", NewAdminGate(nil, false, nil), "127.0.0.1:1", "Bearer ", http.StatusForbidden, "Authorization", false},
		{"zero gate", &AdminGate{}, "127.0.0.1:1", "Bearer x", http.StatusForbidden, "Authorization", false},
		{"remote", NewAdminGate(map[string]string{"ops": "s3cret"}, false, nil), "192.0.2.1:1", "Bearer s3cret", http.StatusForbidden, "", false},
		{"missing", NewAdminGate(map[string]string{"ops": "s3cret"}, false, nil), "127.0.0.1:1", "", http.StatusUnauthorized, "Authorization", true},
		{"wrong", NewAdminGate(map[string]string{"ops": "s3cret"}, false, nil), "[::1]:1", "Bearer s3cre", http.StatusUnauthorized, "Authorization", true},
		{"basic", NewAdminGate(map[string]string{"ops": "s3cret"}, false, nil), "[::1]:1", "Basic s3cret", http.StatusUnauthorized, "Authorization", true},
		{"loopback", NewAdminGate(map[string]string{"ops": "s3cret"}, false, nil), "127.0.0.1:1", "Bearer s3cret", http.StatusOK, "", false},
		{"from anywhere", NewAdminGate(map[string]string{"ops": "s3cret"}, true, nil), "192.0.2.1:1", "bearer s3cret", http.StatusOK, "", false},
	} {
		code, e, h := answer(t, tt.gate.Wrap("the admin endpoints", ok), req(tt.remote, tt.auth))
		if code != tt.status || e.Field != tt.field || (h.Get("WWW-Authenticate") != "") != tt.challenge {
			t.Errorf("%s: %d %+v (WWW-Authenticate %q), want %d naming %q", tt.name, code, e, h.Get("WWW-Authenticate"), tt.status, tt.field)
		}
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	type body struct {
		Name string `json:"name"`
		N    int64  `json:"n"`
	}
	for _, tt := range []struct {
		body     string
		optional bool
		status   int
		field    string
		message  string
	}{
		{`{"name": "a", "n": 2}`, false, http.StatusOK, "", ""},
		{``, true, http.StatusOK, "", ""},
		{``, false, http.StatusBadRequest, "body", "empty body"},
		{`{"name": "a"`, true, http.StatusBadRequest, "body", "truncated JSON"},
		{`{"name": 1}`, false, http.StatusBadRequest, "name", "want a string, got number"},
		{`{"n": "1"}`, false, http.StatusBadRequest, "n", "want an integer, got string"},
		{`{"nme": "a"}`, false, http.StatusBadRequest, "nme", "unknown field"},
		{`{} {}`, false, http.StatusBadRequest, "body", "unexpected data"},
		{`{"name": "` + strings.Repeat("x", 100) + `"}`, false, http.StatusRequestEntityTooLarge, "body", "larger than 64 bytes"},
		{`{"name": "a"}` + strings.Repeat(" ", 100), false, http.StatusRequestEntityTooLarge, "body", "larger than 64 bytes"},
		{`[1]`, false, http.StatusBadRequest, "body", "want an object, got array"},
	} {
		h := func(w http.ResponseWriter, r *http.Request) {
			var b body
			decode := Decode
			if tt.optional {
				decode = DecodeOptional
			}
			if e := decode(w, r, 64, &b); e != nil {
				WriteError(w, e)
				return
			}
			w.WriteHeader(http.StatusOK)
		}
		code, e, _ := answer(t, h, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body)))
		if code != tt.status || e.Field != tt.field || !strings.Contains(e.Message, tt.message) {
			t.Errorf("%.30q (optional %v): %d %+v, want %d naming %q with %q", tt.body, tt.optional, code, e, tt.status, tt.field, tt.message)
		}
	}
}

func TestWriteErrorShape(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	Fail(w, BadRequest("cost", "must be <= %d", 5))
	if got, want := w.Body.String(), `{"error":{"field":"cost","message":"must be <= 5"}}`+"\n"; got != want || w.Code != http.StatusBadRequest {
		t.Errorf("got %d %s, want 400 %s", w.Code, got, want)
	}
	if h := w.Header(); h.Get("Content-Type") != "application/json" || h.Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v", h)
	}
	w = httptest.NewRecorder()
	Fail(w, http.ErrBodyNotAllowed)
	if w.Code != http.StatusInternalServerError || strings.Contains(w.Body.String(), `"field"`) {
		t.Errorf("a plain error: %d %s", w.Code, w.Body)
	}
	if a, b := NewID(), NewID(); len(a) != 32 || a == b {
		t.Errorf("NewID: %q, %q", a, b)
	}
}
