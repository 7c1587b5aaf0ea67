package web_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokenlimit/tokenlimit/server/httpapi"
	"github.com/tokenlimit/tokenlimit/web"
)

// mounted serves the dashboard as tokenlimit serve does: as the HTTP API's
// Dashboard, at every path the API does not own.
func mounted(t testing.TB, e *env) http.Handler {
	t.Helper()
	h, err := httpapi.New(e.svc, httpapi.Options{Dashboard: e.h, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestMountedUnderTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, web.Options{}, false)
	srv := httptest.NewServer(mounted(t, e))
	defer srv.Close()
	for path, want := range map[string]string{
		"/":               `<script src="/ui/app.js" defer>`,
		"/ui/app.js":      "only draws what the server answers",
		"/ui/api/limits":  `"name":"hard-cap"`,
		"/v1/limits":      `"name":"hard-cap"`, // the API's own
		"/ui/api/nothing": "no dashboard endpoint",
	} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, no %q in %.200s", path, res.StatusCode, want, body)
		}
	}

	for range 3 {
		res, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(`{"descriptors": {"user": "gina", "route": "/v1/chat"}}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	var o overviewAnswer
	e.do(http.MethodGet, "/ui/api/overview?seconds=5", "").json(t, http.StatusOK, &o)
	if got := o.total("llm-budget", "allowed"); got != 3 {
		t.Errorf("after 3 checks on /v1/check the overview counts %d allowed", got)
	}
}
