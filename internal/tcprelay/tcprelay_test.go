package tcprelay_test

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/tcprelay"
)

// echo is a real TCP echo server counting what it received.
type echo struct {
	ln       net.Listener
	received atomic.Int64
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					e.received.Add(int64(n))
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return e
}

func startRelay(t *testing.T, target string) *tcprelay.Relay {
	t.Helper()
	r, err := tcprelay.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Only a failing test waits this long.
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

func send(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
}

func expect(t *testing.T, c net.Conn, want string) {
	t.Helper()
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
		t.Fatalf("read %q, %v; want %q", buf, err, want)
	}
}

// eventually polls cond until it holds, failing after 20 seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestForwardsBothWays(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	r := startRelay(t, e.ln.Addr().String())
	c := dial(t, r.Addr())
	send(t, c, "hello")
	expect(t, c, "hello")
	// The counters move once a write has returned, which may be after the
	// client has read.
	eventually(t, "5 bytes read and written each way", func() bool {
		return r.Read(tcprelay.Requests) == 5 && r.Written(tcprelay.Requests) == 5 &&
			r.Read(tcprelay.Replies) == 5 && r.Written(tcprelay.Replies) == 5
	})
	if n := r.Conns(); n != 1 {
		t.Errorf("Conns() = %d, want 1", n)
	}
	c.Close()
	eventually(t, "the connection gone once the client closed", func() bool { return r.Conns() == 0 })
}

// A delay holds each reply back from the time it was read; lowering the
// delay lets what waited go at once, in order.
func TestDelayedReplies(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	r := startRelay(t, e.ln.Addr().String())
	c := dial(t, r.Addr())
	r.SetDelay(tcprelay.Replies, time.Hour)
	send(t, c, "ping")
	eventually(t, "the reply read by the relay", func() bool { return r.Read(tcprelay.Replies) == 4 })
	send(t, c, "pong")
	eventually(t, "the second reply read by the relay", func() bool { return r.Read(tcprelay.Replies) == 8 })
	if got := r.Written(tcprelay.Replies); got != 0 {
		t.Fatalf("%d reply bytes written with an hour's delay, want 0", got)
	}
	eventually(t, "requests not delayed", func() bool { return r.Written(tcprelay.Requests) == 8 })
	r.SetDelay(tcprelay.Replies, 0)
	expect(t, c, "pingpong")
}

// Hold is a blackhole: the bytes are read and kept, the connection stays
// open, and Release sends them on.
func TestHoldAndRelease(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	r := startRelay(t, e.ln.Addr().String())
	c := dial(t, r.Addr())
	r.Hold(tcprelay.Requests)
	send(t, c, "abc")
	eventually(t, "the request read by the relay", func() bool { return r.Read(tcprelay.Requests) == 3 })
	if got := e.received.Load(); got != 0 {
		t.Fatalf("the target received %d bytes through a hold", got)
	}
	r.Release(tcprelay.Requests)
	expect(t, c, "abc")
}

func TestResetBreaksConnections(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	r := startRelay(t, e.ln.Addr().String())
	c := dial(t, r.Addr())
	send(t, c, "x")
	expect(t, c, "x")
	r.Hold(tcprelay.Replies) // what waits is dropped by the reset
	send(t, c, "y")
	eventually(t, "the reply waiting in the relay", func() bool { return r.Read(tcprelay.Replies) == 2 })
	r.Reset()
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes after Reset, want an error", n)
	}
	eventually(t, "no connection left", func() bool { return r.Conns() == 0 })
	r.Release(tcprelay.Replies)
	c2 := dial(t, r.Addr())
	send(t, c2, "z")
	expect(t, c2, "z")
}

// Cut closes the client's connection cleanly (it reads EOF, not a reset)
// and drops the reply that waited in the relay.
func TestCutEndsConnectionsCleanly(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	r := startRelay(t, e.ln.Addr().String())
	c := dial(t, r.Addr())
	r.Hold(tcprelay.Replies)
	send(t, c, "lost")
	eventually(t, "the reply waiting in the relay", func() bool { return r.Read(tcprelay.Replies) == 4 })
	r.Cut()
	if n, err := c.Read(make([]byte, 4)); !errors.Is(err, io.EOF) {
		t.Fatalf("read %d bytes, %v after Cut; want io.EOF", n, err)
	}
	if n := r.Conns(); n != 0 {
		t.Errorf("Conns() = %d after Cut, want 0", n)
	}
	r.Release(tcprelay.Replies)
	c2 := dial(t, r.Addr())
	send(t, c2, "next")
	expect(t, c2, "next")
}

func TestCloseAndReopen(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	r := startRelay(t, e.ln.Addr().String())
	c := dial(t, r.Addr())
	send(t, c, "1")
	expect(t, c, "1")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a connection outlived Close")
	}
	if c, err := net.Dial("tcp", r.Addr()); err == nil {
		c.Close()
		t.Fatal("dialing a closed relay succeeded")
	}
	if r.Conns() != 0 {
		t.Errorf("Conns() = %d after Close", r.Conns())
	}
	if err := r.Reopen(); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, r.Addr())
	send(t, c2, "2")
	expect(t, c2, "2")
}

// A target that refuses is a connection reset for the client.
func TestTargetDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	r := startRelay(t, down)
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		return // reset before the dial returned
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from a relay to a closed port: %d bytes, %v; want a reset", n, err)
	}
}
