package web_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/service"
	"github.com/tokenlimit/tokenlimit/web"
)

// BenchmarkCheck measures the decision path with the dashboard's overview
// closed and open: service.Check, and POST /v1/check through the HTTP API
// in process, while 0, 1 or 8 overview streams are open and read (8 of them
// at ten times the default rate). Requests come from 10,000 users of the
// test configuration; the open/closed comparison is what matters, on the
// same mix of allowed and denied decisions.
//
//	go test -run '^$' -bench BenchmarkCheck -benchtime 2s -count 10 ./web/ > new.txt
//	benchstat -col /streams new.txt
func BenchmarkCheck(b *testing.B) {
	users := make([]map[string]string, 10_000)
	bodies := make([]string, len(users))
	for i := range users {
		users[i] = map[string]string{"user": fmt.Sprintf("user-%d", i), "route": "/v1/chat"}
		bodies[i] = fmt.Sprintf(`{"descriptors": {"user": "user-%d", "route": "/v1/chat"}}`, i)
	}
	for _, c := range []struct {
		streams  int
		interval time.Duration
	}{{0, time.Second}, {1, time.Second}, {8, 100 * time.Millisecond}} {
		name := fmt.Sprintf("streams=%d", c.streams)
		if c.streams > 0 {
			name += "x" + c.interval.String()
		}
		b.Run("path=service/"+name, func(b *testing.B) {
			e := openStreams(b, c.streams, c.interval)
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, err := e.svc.Check(context.Background(), service.Request{Descriptors: users[n.Add(1)%int64(len(users))]})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run("path=api/"+name, func(b *testing.B) {
			e := openStreams(b, c.streams, c.interval)
			h := mounted(b, e)
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(bodies[n.Add(1)%int64(len(bodies))]))
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests {
						b.Errorf("status %d: %s", w.Code, w.Body)
						return
					}
				}
			})
		})
	}
}

// openStreams returns an env whose dashboard has n overview streams open,
// each read to the end by a goroutine, until the benchmark ends.
func openStreams(b *testing.B, n int, interval time.Duration) *env {
	b.Helper()
	e := newEnv(b, nil, web.Options{StreamInterval: interval}, false)
	srv := httptest.NewServer(e.h)
	b.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	for range n {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/ui/api/overview/stream", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		r := bufio.NewReader(res.Body)
		if _, err := r.ReadString('\n'); err != nil { // the stream is open
			b.Fatal(err)
		}
		go func() {
			defer res.Body.Close()
			_, _ = io.Copy(io.Discard, r)
		}()
	}
	b.ResetTimer()
	return e
}
