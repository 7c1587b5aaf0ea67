package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/server/httpapi"
	"github.com/tokenlimit/tokenlimit/service"
)

// The admin endpoints answer loopback clients only, even with the right
// token, unless AdminFromAnywhere says otherwise.
func TestAdminAnswersLoopbackOnlyByDefault(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(cfg, service.Options{Store: st, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		remote   string
		anywhere bool
		want     int
	}{
		{"127.0.0.1:4000", false, http.StatusOK},
		{"[::1]:4000", false, http.StatusOK},
		{"203.0.113.7:4000", false, http.StatusForbidden},
		{"[2001:db8::1]:4000", false, http.StatusForbidden},
		{"203.0.113.7:4000", true, http.StatusOK},
	} {
		h, err := httpapi.New(svc, httpapi.Options{AdminToken: "secret", AdminFromAnywhere: tc.anywhere, Logger: testkit.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/admin/inspect", strings.NewReader(`{"descriptors":{"user":"alice"}}`))
		req.RemoteAddr = tc.remote
		req.Header.Set("Authorization", "Bearer secret")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("from %s (anywhere=%v): %d %s, want %d", tc.remote, tc.anywhere, rec.Code, rec.Body.String(), tc.want)
		}
	}
}
