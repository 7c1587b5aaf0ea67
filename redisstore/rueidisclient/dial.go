package rueidisclient

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
)

// Dial is a rueidis.ClientOption.DialCtxFn that dials as rueidis does, and
// closes the connection if the context it was dialled on ends before Redis
// has sent a byte on it. Set it on every client whose calls have a deadline
// (the store timeout) to keep each call within it.
//
// rueidis dials a connection on the context of the first call routed to
// it, and greets Redis (HELLO) on that context. When the context ends
// between the dial and the greeting (building the connection's buffers
// takes tens of milliseconds on a loaded machine), the greeting is never
// sent, and rueidis closes the new connection by sending it a PING and
// waiting for the reply, for up to one second when Redis does not answer:
// the call that dialled waits that second past its deadline. Closed at the
// context's end, the connection fails that PING at once. A greeting that
// was sent fails at the context's deadline as before (rueidis sets it on
// the connection), and a connection Redis has answered on is left alone:
// a later call's deadline never closes it.
func Dial(ctx context.Context, dst string, dialer *net.Dialer, tlsConfig *tls.Config) (net.Conn, error) {
	var conn net.Conn
	var err error
	if tlsConfig != nil {
		conn, err = (&tls.Dialer{NetDialer: dialer, Config: tlsConfig}).DialContext(ctx, "tcp", dst)
	} else {
		conn, err = dialer.DialContext(ctx, "tcp", dst)
	}
	if err != nil || ctx.Done() == nil {
		return conn, err
	}
	c := &greetedConn{Conn: conn}
	c.stop = context.AfterFunc(ctx, func() {
		if !c.answered.Load() {
			conn.Close()
		}
	})
	return c, nil
}

// greetedConn is a dialled connection that is closed when its dialling
// context ends, until the first byte from Redis arrives (answered).
type greetedConn struct {
	net.Conn
	answered atomic.Bool
	stop     func() bool // stops the close at the context's end
}

// Read reads from the connection; the first byte read marks it answered.
func (c *greetedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.answered.Load() {
		c.answered.Store(true)
		c.stop()
	}
	return n, err
}

// Close closes the connection, and stops watching its dialling context.
func (c *greetedConn) Close() error {
	c.stop()
	return c.Conn.Close()
}
