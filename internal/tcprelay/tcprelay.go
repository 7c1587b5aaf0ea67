// Package tcprelay is a TCP relay on loopback for fault tests: it forwards
// every connection it accepts to a target address and lets a test make the
// path between them slow, silent, broken or closed, for real sockets.
//
// Each connection is two pumps, one per Direction. A pump reads what
// arrives, stamps each chunk with the time it was read, and writes the
// chunks out in order, each once it has waited the direction's delay (the
// delay in force when it is written: lowering it lets waiting chunks go at
// once) and only while the direction is not held. So a delay makes every
// reply late by that much, Hold is a blackhole that keeps connections open,
// and Reset and Close break them.
//
// A Relay is safe for concurrent use.
package tcprelay

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Direction is one way through the relay.
type Direction int

// The directions.
const (
	// Requests flow from the client that dialed the relay to the target.
	Requests Direction = iota
	// Replies flow from the target back to the client.
	Replies
)

// String returns "requests" or "replies".
func (d Direction) String() string {
	if d == Requests {
		return "requests"
	}
	return "replies"
}

// Relay forwards connections from Addr to a target. The zero value is not
// usable; use Start.
type Relay struct {
	target string
	addr   string
	gates  [2]gate
	// read and written count the bytes each direction read from one side
	// and wrote to the other; read-written are waiting in the relay.
	read, written [2]atomic.Int64

	mu    sync.Mutex
	ln    net.Listener // nil while closed
	conns map[*pair]struct{}
	wg    sync.WaitGroup // the accept loops and the pumps
}

// Start listens on a free loopback port and forwards every connection to
// target (host:port), dialed when the connection is accepted.
func Start(target string) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcprelay: listen: %w", err)
	}
	r := &Relay{target: target, addr: ln.Addr().String(), conns: map[*pair]struct{}{}}
	for i := range r.gates {
		r.gates[i].changed = make(chan struct{})
	}
	r.serve(ln)
	return r, nil
}

// Addr is the host:port clients dial; it stays the same across Reopen.
func (r *Relay) Addr() string { return r.addr }

// SetDelay makes every chunk in dir wait d (0: none) after it was read
// before it is written on. It applies to chunks already waiting too.
func (r *Relay) SetDelay(dir Direction, d time.Duration) {
	r.gates[dir].set(func(g *gate) { g.delay = d })
}

// Hold stops writing anything in dir: what arrives is read and kept, in
// order, until Release. Connections stay open.
func (r *Relay) Hold(dir Direction) { r.gates[dir].set(func(g *gate) { g.held = true }) }

// Release lets what Hold kept in dir go on, subject to its delay.
func (r *Relay) Release(dir Direction) { r.gates[dir].set(func(g *gate) { g.held = false }) }

// Read returns how many bytes the relay has read in dir so far (from the
// client for Requests, from the target for Replies).
func (r *Relay) Read(dir Direction) int64 { return r.read[dir].Load() }

// Written returns how many bytes the relay has written on in dir so far;
// Read(dir) - Written(dir) are waiting in the relay.
func (r *Relay) Written(dir Direction) int64 { return r.written[dir].Load() }

// Conns returns the number of open connections.
func (r *Relay) Conns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// Reset breaks every open connection with a TCP reset on both sides, and
// drops what was waiting in them; Conns is 0 when it returns. The relay
// goes on accepting.
func (r *Relay) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range r.conns {
		p.close()
		delete(r.conns, p)
	}
}

// Cut ends every open connection cleanly, as a peer that closes its
// socket does (the client reads EOF), and drops what was waiting in them:
// a reply Hold kept is lost. Conns is 0 when it returns; the relay goes on
// accepting.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range r.conns {
		p.end(false)
		delete(r.conns, p)
	}
}

// Close stops listening (dialing Addr is refused) and resets every
// connection, then waits for the relay's goroutines to end. Reopen listens
// again. Close is idempotent; do not call it concurrently with Reopen.
func (r *Relay) Close() error {
	r.mu.Lock()
	var err error
	if r.ln != nil {
		err = r.ln.Close()
		r.ln = nil
	}
	for p := range r.conns {
		p.close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	if err != nil {
		return fmt.Errorf("tcprelay: close: %w", err)
	}
	return nil
}

// Reopen listens on Addr again after Close; it is a no-op while open.
func (r *Relay) Reopen() error {
	r.mu.Lock()
	open := r.ln != nil
	r.mu.Unlock()
	if open {
		return nil
	}
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return fmt.Errorf("tcprelay: reopen %s: %w", r.addr, err)
	}
	r.serve(ln)
	return nil
}

// serve accepts on ln until it is closed.
func (r *Relay) serve(ln net.Listener) {
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Go(func() { r.relay(c.(*net.TCPConn)) })
		}
	})
}

// relay dials the target for client and runs the two pumps until either
// side ends.
func (r *Relay) relay(client *net.TCPConn) {
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		client.SetLinger(0)
		client.Close()
		return
	}
	p := &pair{client: client, target: up.(*net.TCPConn), done: make(chan struct{})}
	r.mu.Lock()
	if r.ln == nil { // closed meanwhile
		r.mu.Unlock()
		p.close()
		return
	}
	r.conns[p] = struct{}{}
	r.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { r.pump(p, Requests, p.client, p.target) })
	wg.Go(func() { r.pump(p, Replies, p.target, p.client) })
	wg.Wait()
	p.close()
	r.mu.Lock()
	delete(r.conns, p)
	r.mu.Unlock()
}

// chunk is what one read returned, and when.
type chunk struct {
	data []byte
	at   time.Time
}

// pump copies src to dst for dir through its gate; when either side fails
// it closes the pair, which ends the other pump too. A src that ends
// cleanly (EOF) is passed on as a half-close once its chunks are written.
func (r *Relay) pump(p *pair, dir Direction, src, dst *net.TCPConn) {
	chunks := make(chan chunk, 64)
	go func() { // ends when src fails, which p.close makes happen
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				r.read[dir].Add(int64(n))
				select {
				case chunks <- chunk{buf[:n], time.Now()}:
				case <-p.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if !r.gates[dir].wait(c.at, p.done) {
			break
		}
		if _, err := dst.Write(c.data); err != nil {
			break
		}
		r.written[dir].Add(int64(len(c.data)))
	}
	select {
	case <-p.done:
	default:
		if dst.CloseWrite() == nil {
			return // a clean end of src: the other direction may go on
		}
	}
	p.close()
	for range chunks { // let the reader end
	}
}

// pair is one relayed connection.
type pair struct {
	client, target *net.TCPConn
	once           sync.Once
	done           chan struct{} // closed by close
}

// close resets both sides.
func (p *pair) close() { p.end(true) }

// end closes both sides, with a TCP reset if reset is set and with a clean
// close (FIN) otherwise; only its first call does anything.
func (p *pair) end(reset bool) {
	p.once.Do(func() {
		close(p.done)
		for _, c := range []*net.TCPConn{p.client, p.target} {
			if reset {
				c.SetLinger(0)
			}
			c.Close()
		}
	})
}

// gate is one direction's delay and hold.
type gate struct {
	mu      sync.Mutex
	delay   time.Duration
	held    bool
	changed chan struct{} // closed and replaced on every change
}

func (g *gate) set(fn func(*gate)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fn(g)
	close(g.changed)
	g.changed = make(chan struct{})
}

// wait blocks until a chunk read at at may be written, or done is closed
// (then it returns false).
func (g *gate) wait(at time.Time, done <-chan struct{}) bool {
	for {
		g.mu.Lock()
		delay, held, changed := g.delay, g.held, g.changed
		g.mu.Unlock()
		var timer *time.Timer
		var timeout <-chan time.Time
		if !held {
			left := time.Until(at.Add(delay))
			if left <= 0 {
				return true
			}
			timer = time.NewTimer(left)
			timeout = timer.C
		}
		select {
		case <-changed:
		case <-timeout:
		case <-done:
		}
		if timer != nil {
			timer.Stop()
		}
		select {
		case <-done:
			return false
		default:
		}
	}
}
