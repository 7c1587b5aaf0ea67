package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rlsServer answers by user: user-0 OVER_LIMIT, user-1 UNKNOWN, user-2 a
// gRPC error, user-3 waits for release, anyone else OK; a request that is
// not domain bench with one entry {user: user-N} is an InvalidArgument.
type rlsServer struct {
	rlspb.UnimplementedRateLimitServiceServer
	waiting chan struct{}
	release chan struct{}
}

func (s *rlsServer) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	d := req.GetDescriptors()
	if req.GetDomain() != "bench" || len(d) != 1 || len(d[0].GetEntries()) != 1 || d[0].GetEntries()[0].GetKey() != "user" ||
		!strings.HasPrefix(d[0].GetEntries()[0].GetValue(), "user-") {
		return nil, status.Errorf(codes.InvalidArgument, "unexpected request %v", req)
	}
	code := rlspb.RateLimitResponse_OK
	switch d[0].GetEntries()[0].GetValue() {
	case "user-0":
		code = rlspb.RateLimitResponse_OVER_LIMIT
	case "user-1":
		code = rlspb.RateLimitResponse_UNKNOWN
	case "user-2":
		return nil, status.Error(codes.ResourceExhausted, "no")
	case "user-3":
		s.waiting <- struct{}{}
		select {
		case <-s.release:
		case <-ctx.Done():
		}
	}
	// Fields the client skips, around the one it reads.
	return &rlspb.RateLimitResponse{OverallCode: code, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: code, LimitRemaining: 7}},
		RawBody: []byte("body")}, nil
}

func startRLSServer(t *testing.T) (*rlsServer, *grpc.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rlsServer{waiting: make(chan struct{}, 1), release: make(chan struct{})}
	g := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(g, s)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return s, g, ln.Addr().String()
}

func TestRLSClientAnswers(t *testing.T) {
	_, _, addr := startRLSServer(t)
	c, err := dialRLSClient(addr, 100, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	call := c.caller()
	for _, tc := range []struct {
		user    int
		ok      bool
		wantErr string
	}{
		{user: 5, ok: true},
		{user: 0},
		{user: 1, wantErr: "overall code UNKNOWN"},
		{user: 2, wantErr: `grpc-status "8": no`},
		{user: 99, ok: true},
	} {
		ok, err := call(context.Background(), tc.user)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("user-%d: error %v, want one with %q", tc.user, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("user-%d: %v", tc.user, err)
		case ok != tc.ok:
			t.Errorf("user-%d: ok %v, want %v", tc.user, ok, tc.ok)
		}
	}
}

// TestRLSClientConcurrent sends more than the connection's initial flow
// control window from many callers on one connection, so that it runs on
// the server's window updates; with the header fields as literals and
// indexed in HPACK's dynamic table.
func TestRLSClientConcurrent(t *testing.T) {
	for _, indexed := range []bool{false, true} {
		t.Run(fmt.Sprintf("indexed=%v", indexed), func(t *testing.T) { testConcurrent(t, indexed) })
	}
}

func testConcurrent(t *testing.T, indexed bool) {
	_, _, addr := startRLSServer(t)
	c, err := dialRLSClient(addr, 10_000, 1, indexed)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	const callers, calls = 16, 500 // 8,000 requests of about 35 bytes
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		call := c.caller()
		wg.Go(func() {
			for n := range calls {
				user := 100 + (g*calls+n)%9_900
				ok, err := call(context.Background(), user)
				if err == nil && !ok {
					err = context.Canceled // any error: an OK was expected
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRLSClientEnds(t *testing.T) {
	s, g, addr := startRLSServer(t)
	c, err := dialRLSClient(addr, 100, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	call := c.caller()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := call(ctx, 3); done <- err }()
	<-s.waiting
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "no answer") {
		t.Errorf("a call whose run ended: %v, want a no-answer error", err)
	}
	if _, err := call(context.Background(), 5); err == nil {
		t.Error("a call on the connection closed by it: no error")
	}

	c2, err := dialRLSClient(addr, 100, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.close()
	call2 := c2.caller()
	if _, err := call2(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	g.Stop()
	if _, err := call2(context.Background(), 5); err == nil {
		t.Error("a call to a stopped server: no error")
	}
}

func TestOverallCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		code uint64
		err  bool
	}{
		{"empty message: UNKNOWN", []byte{0, 0, 0, 0, 0}, 0, false},
		{"overall_code 2 after other fields", []byte{0, 0, 0, 0, 6, 0x12, 0x02, 0x08, 0x01, 0x08, 0x02}, 2, false},
		{"the last overall_code wins", []byte{0, 0, 0, 0, 4, 0x08, 0x01, 0x08, 0x02}, 2, false},
		{"compressed", []byte{1, 0, 0, 0, 2, 0x08, 0x01}, 0, true},
		{"length mismatch", []byte{0, 0, 0, 0, 3, 0x08, 0x01}, 0, true},
		{"short prefix", []byte{0, 0, 0}, 0, true},
		{"truncated varint", []byte{0, 0, 0, 0, 2, 0x08, 0x80}, 0, true},
		{"truncated field", []byte{0, 0, 0, 0, 3, 0x12, 0x05, 0x01}, 0, true},
	} {
		code, err := overallCode(tc.b)
		if (err != nil) != tc.err || (!tc.err && code != tc.code) {
			t.Errorf("%s: %d, %v; want %d, error %v", tc.name, code, err, tc.code, tc.err)
		}
	}
}
