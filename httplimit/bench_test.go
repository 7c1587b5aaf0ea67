package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/httplimit"
	"github.com/tokenlimit/tokenlimit/internal/ratelimitheader"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// discard is a ResponseWriter that keeps its header map between requests
// (cleared), so that the benchmark measures the handler, not the recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func ok(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }

// BenchmarkMiddleware compares a bare handler with the same handler behind
// the middleware on the embedded store: one decision (a token bucket that
// always admits) and the rate-limit headers per request; engine-only makes
// the same decision with Limiter.AllowN and writes no headers.
func BenchmarkMiddleware(b *testing.B) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	l, err := tokenlimit.NewLimiter(st)
	if err != nil {
		b.Fatal(err)
	}
	mw, err := httplimit.New(l, tokenlimit.TokenBucketLimit(tokenlimit.MaxQuota, tokenlimit.MaxQuota, time.Millisecond),
		httplimit.Options{Key: httplimit.KeyFromHeader("X-Api-Key")})
	// engine-only is the bare handler after the same decision, made
	// directly: the middleware's own cost is the difference.
	if err != nil {
		b.Fatal(err)
	}
	limit := tokenlimit.TokenBucketLimit(tokenlimit.MaxQuota, tokenlimit.MaxQuota, time.Millisecond)
	engineOnly := func(w http.ResponseWriter, r *http.Request) {
		if _, err := l.AllowN(r.Context(), "k1", limit, 1); err != nil {
			b.Fatal(err)
		}
		ok(w, r)
	}
	// engine-and-headers adds the headers the middleware writes.
	engineAndHeaders := func(w http.ResponseWriter, r *http.Request) {
		res, err := l.AllowN(r.Context(), r.Header.Get("X-Api-Key"), limit, 1)
		if err != nil {
			b.Fatal(err)
		}
		ratelimitheader.Of("default", res, false, limit.Window()).SetHTTP(w.Header())
		ok(w, r)
	}
	for _, bb := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", http.HandlerFunc(ok)},
		{"engine-only", http.HandlerFunc(engineOnly)},
		{"engine-and-headers", http.HandlerFunc(engineAndHeaders)},
		{"middleware", mw.Handler(http.HandlerFunc(ok))},
	} {
		b.Run(bb.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-Api-Key", "k1")
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				bb.h.ServeHTTP(w, r)
			}
		})
	}
}
