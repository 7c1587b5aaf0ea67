package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// rawConn is a minimal HTTP/1.1 keep-alive client on one connection, like
// wrk's: requests are prepared bytes, and an answer is read as its status,
// its headers (for Content-Length, chunking and Connection: close) and a
// discarded body. It costs the load generator a fraction of what net/http's
// client does, which leaves more of a shared machine's CPUs to the service.
// It is not safe for concurrent use: each caller goroutine has its own.
type rawConn struct {
	addr string
	conn net.Conn
	r    *bufio.Reader
}

// do sends req and returns the answer's status. A request that fails on a
// reused connection before any answer arrived (the server closed it while
// idle) is sent again once on a new connection.
func (c *rawConn) do(req []byte) (int, error) {
	reused := c.conn != nil
	code, err := c.try(req)
	if err != nil && reused && errors.Is(err, errStale) {
		code, err = c.try(req)
	}
	return code, err
}

var errStale = errors.New("connection closed before the answer")

func (c *rawConn) try(req []byte) (int, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
		if err != nil {
			return 0, err
		}
		c.conn = conn
		if c.r == nil {
			c.r = bufio.NewReaderSize(conn, 4096)
		} else {
			c.r.Reset(conn)
		}
	}
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.conn.Write(req); err != nil {
		c.close()
		return 0, fmt.Errorf("%w: %v", errStale, err)
	}
	code, keep, err := c.readAnswer()
	if err != nil || !keep {
		c.close()
	}
	return code, err
}

func (c *rawConn) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// readAnswer reads one answer: "HTTP/1.1 200 OK", headers, body.
func (c *rawConn) readAnswer() (code int, keep bool, err error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 && (errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)) {
			err = fmt.Errorf("%w: %v", errStale, err)
		}
		return 0, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	if code, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	length, chunked, keep := -1, false, true
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, false, fmt.Errorf("bad header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, false, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			keep = !bytes.EqualFold(value, []byte("close"))
		}
	}
	switch {
	case chunked:
		err = c.skipChunks()
	case length >= 0:
		_, err = c.r.Discard(length)
	default:
		return code, false, errors.New("answer with neither Content-Length nor chunking")
	}
	return code, keep, err
}

func (c *rawConn) skipChunks() error {
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, err := strconv.ParseInt(string(bytes.TrimRight(line, "\r\n")), 16, 64)
		if err != nil {
			return fmt.Errorf("bad chunk size %q", line)
		}
		if _, err := c.r.Discard(int(size) + 2); err != nil {
			return err
		}
		if size == 0 {
			return nil
		}
	}
}

// rawCheck returns a caller factory for POST /v1/check and GET /healthz
// through rawConn: one connection per goroutine.
func rawCallers(addr string, users int) (check, health factory) {
	reqs := make([][]byte, users)
	for i := range reqs {
		body := checkBody(i)
		reqs[i] = fmt.Appendf(nil, "POST /v1/check HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	}
	healthReq := fmt.Appendf(nil, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	mk := func(req func(i int) []byte) factory {
		return func() (caller, func()) {
			c := &rawConn{addr: addr}
			return func(_ context.Context, i int) (bool, error) {
				code, err := c.do(req(i))
				if err != nil {
					return false, err
				}
				return statusResult(code)
			}, c.close
		}
	}
	return mk(func(i int) []byte { return reqs[i] }), mk(func(int) []byte { return healthReq })
}
