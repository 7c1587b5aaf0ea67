package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// health exits 0 on a 200 only; a 503 or no answer is ExitUnreachable.
func TestHealthExitStatus(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	var out strings.Builder
	if err := Run(context.Background(), []string{"health", "--url", srv.URL + "/readyz"}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "200 OK") {
		t.Errorf("health of a ready server: %v, %q", err, out.String())
	}
	status.Store(http.StatusServiceUnavailable)
	err := Run(context.Background(), []string{"health", "--url", srv.URL + "/readyz"}, io.Discard, io.Discard)
	if ExitCode(err) != ExitUnreachable || !strings.Contains(err.Error(), "503") {
		t.Errorf("health of a server answering 503: %v (exit %d), want exit %d naming the 503", err, ExitCode(err), ExitUnreachable)
	}
	srv.Close()
	err = Run(context.Background(), []string{"health", "--url", srv.URL + "/readyz"}, io.Discard, io.Discard)
	if ExitCode(err) != ExitUnreachable || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("health of no server: %v (exit %d), want exit %d, connection refused", err, ExitCode(err), ExitUnreachable)
	}
}
