package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRawConn checks the minimal client against net/http's server: sized
// and chunked bodies, keep-alive, and a server that closes the connection.
func TestRawConn(t *testing.T) {
	var conns int
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/sized":
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintf(w, "%s", body)
		case "/chunked":
			w.Write([]byte(strings.Repeat("x", 5000)))
			w.(http.Flusher).Flush()
			w.Write([]byte("end"))
		case "/close":
			w.Header().Set("Connection", "close")
			w.Write([]byte("bye"))
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns++
		}
	}
	srv.Start()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	c := &rawConn{addr: addr}
	defer c.close()
	req := func(method, path, body string) []byte {
		return fmt.Appendf(nil, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", method, path, addr, len(body), body)
	}
	for _, step := range []struct {
		path string
		want int
	}{{"/sized", 429}, {"/chunked", 200}, {"/sized", 429}, {"/close", 200}, {"/sized", 429}} {
		code, err := c.do(req("POST", step.path, `{"a":1}`))
		if err != nil || code != step.want {
			t.Fatalf("%s: %d, %v; want %d", step.path, code, err, step.want)
		}
	}
	if conns != 2 {
		t.Errorf("%d connections, want 2 (one reused until /close)", conns)
	}
}

func TestStatusResult(t *testing.T) {
	if ok, err := statusResult(200); !ok || err != nil {
		t.Errorf("200: %v, %v", ok, err)
	}
	if ok, err := statusResult(429); ok || err != nil {
		t.Errorf("429: %v, %v", ok, err)
	}
	if _, err := statusResult(503); err == nil {
		t.Error("503: no error")
	}
}

// TestOpenLoop checks that the open loop sends every scheduled call and
// times it from its schedule, even when the callee stalls.
func TestOpenLoop(t *testing.T) {
	stall := 30 * time.Millisecond
	var calls int
	call := func(_ context.Context, i int) (bool, error) {
		if i == 0 {
			time.Sleep(stall)
		}
		return true, nil
	}
	got := openLoop(context.Background(), shared(call), 1000, 100*time.Millisecond, 1, 10)
	calls = got.calls
	if calls != 100 || got.allowed != 100 || len(got.lat) != 100 {
		t.Fatalf("%d calls, %d allowed, %d latencies; want 100", calls, got.allowed, len(got.lat))
	}
	// One worker: the calls due during the stall wait for it, and their
	// latency from the schedule shows it.
	if late := quantile(got.lat, 0.2); late < 5*time.Millisecond {
		t.Errorf("p20 from schedule %v: the stall was not counted", late)
	}
	if q := quantile(got.service, 0.5); q > 5*time.Millisecond {
		t.Errorf("p50 from send %v, want the callee's own time", q)
	}
}
