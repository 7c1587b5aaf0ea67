package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The HTTP/2 frames and settings the client uses (RFC 9113).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	settingInitialWindowSize = 0x4

	initialWindow = 65535
	recvWindow    = 1 << 30 // what the client grants the server on the connection
	streamWindow  = 1 << 20 // and on each stream
	maxFrame      = 16384   // SETTINGS_MAX_FRAME_SIZE, the default the client keeps
	maxStreamID   = 1<<31 - 1
)

const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

var errClosed = errors.New("connection closed")

// rlsClient calls ShouldRateLimit for user i (domain bench, one descriptor
// {user: user-i}) over a few HTTP/2 connections, like h2load rather than
// grpc-go's client: every request is prepared bytes (the HEADERS block
// encoded once, without HPACK's dynamic table unless indexed; each user's
// message marshalled once), and an answer is checked as its HTTP status,
// its grpc-status and its message's overall_code, the only field it reads.
// Per call that costs the load generator a fraction of what grpc-go's
// client does, which leaves more of a shared machine's CPUs to the
// services; both services get the same client.
type rlsClient struct {
	conns []*rlsConn
	msgs  [][]byte // per user: a DATA frame's payload, the gRPC prefix and the message
	next  atomic.Int64
}

// dialRLSClient dials conns connections to addr for users users. With
// indexed, a connection's first request adds its header fields to HPACK's
// dynamic table and later ones refer to them, as Envoy's and grpc-go's
// clients do; without, every request sends them as literals never indexed.
func dialRLSClient(addr string, users, conns int, indexed bool) (*rlsClient, error) {
	c := &rlsClient{msgs: make([][]byte, users)}
	for i := range c.msgs {
		req := &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*commonpb.RateLimitDescriptor{{
			Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: "user-" + strconv.Itoa(i)}}}}}
		b, err := proto.Marshal(req)
		if err != nil {
			return nil, fmt.Errorf("marshal a request: %w", err)
		}
		c.msgs[i] = binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b)))
		c.msgs[i] = append(c.msgs[i], b...)
	}
	for range conns {
		conn, err := dialRLS(addr, indexed)
		if err != nil {
			c.close()
			return nil, err
		}
		c.conns = append(c.conns, conn)
	}
	return c, nil
}

func (c *rlsClient) close() {
	for _, conn := range c.conns {
		conn.fail(errClosed)
	}
}

// caller returns a function for one caller goroutine: it calls for user i
// and reports whether the answer was OK (true) or OVER_LIMIT (false); any
// other answer is an error. Callers take the connections in turn. ctx is
// the run's: when it ends before an answer, the call's connection is
// closed.
func (c *rlsClient) caller() func(ctx context.Context, i int) (bool, error) {
	conn := c.conns[int(c.next.Add(1)-1)%len(c.conns)]
	call := &rlsCall{done: make(chan error, 1)}
	return func(ctx context.Context, i int) (bool, error) {
		call.reset()
		if err := conn.send(call, c.msgs[i]); err != nil {
			return false, err
		}
		var err error
		select {
		case err = <-call.done:
		case <-ctx.Done():
			conn.fail(fmt.Errorf("no answer: %w", ctx.Err()))
			err = <-call.done
		}
		if err != nil {
			return false, err
		}
		return call.result()
	}
}

// rlsCall is one caller's call in flight, reused from call to call. The
// connection's reader fills it under the connection's lock until it sends
// on done.
type rlsCall struct {
	done                            chan error
	status, grpcStatus, grpcMessage string
	body                            []byte
}

func (c *rlsCall) reset() {
	c.status, c.grpcStatus, c.grpcMessage = "", "", ""
	c.body = c.body[:0]
}

// result checks the answer: HTTP 200, grpc-status 0, one uncompressed
// message with overall_code OK or OVER_LIMIT.
func (c *rlsCall) result() (bool, error) {
	switch {
	case c.status != "200":
		return false, fmt.Errorf("HTTP status %q", c.status)
	case c.grpcStatus != "0":
		return false, fmt.Errorf("grpc-status %q: %s", c.grpcStatus, c.grpcMessage)
	}
	code, err := overallCode(c.body)
	if err != nil {
		return false, err
	}
	switch rlspb.RateLimitResponse_Code(code) {
	case rlspb.RateLimitResponse_OK:
		return true, nil
	case rlspb.RateLimitResponse_OVER_LIMIT:
		return false, nil
	}
	return false, fmt.Errorf("overall code %v", rlspb.RateLimitResponse_Code(code))
}

// overallCode reads a RateLimitResponse's overall_code (field 1) from a
// gRPC message: its 5-byte prefix, then the protobuf, whose other fields
// it skips; an absent field is UNKNOWN (0), as protobuf decodes it.
func overallCode(b []byte) (uint64, error) {
	if len(b) < 5 || b[0] != 0 || int(binary.BigEndian.Uint32(b[1:5])) != len(b)-5 {
		return 0, fmt.Errorf("not one uncompressed gRPC message: % x", b[:min(len(b), 5)])
	}
	var code uint64
	for m := b[5:]; len(m) > 0; {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return 0, fmt.Errorf("response: %w", protowire.ParseError(n))
		}
		m = m[n:]
		if num == 1 && typ == protowire.VarintType {
			code, n = protowire.ConsumeVarint(m)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, m)
		}
		if n < 0 {
			return 0, fmt.Errorf("response: %w", protowire.ParseError(n))
		}
		m = m[n:]
	}
	return code, nil
}

// rlsConn is one HTTP/2 connection that any number of callers share.
// Callers queue their frames; one writer goroutine writes what has queued
// since its last write in one, and one reader goroutine reads the answers
// and hands each to its caller.
type rlsConn struct {
	conn   net.Conn
	header []byte // a request's HEADERS block
	first  []byte // the first request's, if it differs

	mu      sync.Mutex
	more    *sync.Cond    // the send window grew, or err was set
	kick    chan struct{} // wakes the writer
	wbuf    []byte        // frames queued for the next write
	spare   []byte        // the writer's previous buffer
	writing bool          // the writer is woken, or writing
	nextID  uint32
	window  int64 // the connection's send window
	streamW int64 // the server's initial stream window
	pending map[uint32]*rlsCall
	cur     *rlsCall // the call whose header block is being decoded
	err     error

	// the reader's own
	r        *bufio.Reader
	dec      *hpack.Decoder
	block    []byte // a header block, across CONTINUATION frames
	blockID  uint32
	blockEnd bool // its HEADERS ended the stream
	unacked  int64
}

func dialRLS(addr string, indexed bool) (*rlsConn, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	first, later := requestHeader(addr, indexed)
	c := &rlsConn{conn: conn, header: later, first: first, nextID: 1, window: initialWindow, streamW: initialWindow,
		kick: make(chan struct{}, 1), pending: map[uint32]*rlsCall{}, r: bufio.NewReaderSize(conn, 32<<10)}
	c.more = sync.NewCond(&c.mu)
	c.dec = hpack.NewDecoder(4096, c.emit)
	settings := binary.BigEndian.AppendUint16(nil, settingInitialWindowSize)
	settings = binary.BigEndian.AppendUint32(settings, streamWindow)
	c.mu.Lock()
	c.wbuf = append(c.wbuf, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"...)
	c.wbuf = appendFrame(c.wbuf, frameSettings, 0, 0, settings)
	c.wbuf = appendFrame(c.wbuf, frameWindowUpdate, 0, 0, binary.BigEndian.AppendUint32(nil, recvWindow-initialWindow))
	c.flushLocked()
	go c.write()
	go c.read()
	return c, nil
}

// requestHeader returns ShouldRateLimit's HEADERS blocks for authority
// addr: a connection's first stream's, and every later one's. Not indexed,
// both are the same, every field either in HPACK's static table or a
// literal never indexed. Indexed, the first adds the fields to the dynamic
// table and the later ones refer to them; the table never evicts them (they
// take far less than its 4,096 bytes), so the later block is the same on
// every stream.
func requestHeader(addr string, indexed bool) (first, later []byte) {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	block := func() []byte {
		b.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", shouldRateLimit},
			{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: !indexed}) // a bytes.Buffer does not fail
		}
		return bytes.Clone(b.Bytes())
	}
	first = block()
	return first, block()
}

func appendFrame(b []byte, typ, flags byte, id uint32, p []byte) []byte {
	n := len(p)
	b = append(b, byte(n>>16), byte(n>>8), byte(n), typ, flags)
	b = binary.BigEndian.AppendUint32(b, id)
	return append(b, p...)
}

// send opens a stream with msg as its request, to be answered on call.done;
// an error means the call was not sent, and nothing will be.
func (c *rlsConn) send(call *rlsCall, msg []byte) error {
	c.mu.Lock()
	for c.err == nil && c.window < int64(len(msg)) {
		c.more.Wait()
	}
	switch {
	case c.err != nil:
	case int64(len(msg)) > c.streamW:
		c.failLocked(fmt.Errorf("the server's stream window (%d) is smaller than a request (%d)", c.streamW, len(msg)))
	case c.nextID > maxStreamID:
		c.failLocked(errors.New("stream ids used up"))
	}
	if err := c.err; err != nil {
		c.mu.Unlock()
		return err
	}
	id := c.nextID
	c.nextID += 2
	c.window -= int64(len(msg))
	c.pending[id] = call
	header := c.header
	if id == 1 {
		header = c.first
	}
	c.wbuf = appendFrame(c.wbuf, frameHeaders, flagEndHeaders, id, header)
	c.wbuf = appendFrame(c.wbuf, frameData, flagEndStream, id, msg)
	c.flushLocked()
	return nil
}

// control queues a frame of the connection's own (an acknowledgement, a
// window update) and writes it.
func (c *rlsConn) control(typ, flags byte, p []byte) {
	c.mu.Lock()
	c.wbuf = appendFrame(c.wbuf, typ, flags, 0, p)
	c.flushLocked()
}

// flushLocked has the writer write the queued frames. It is called with
// mu held and releases it.
func (c *rlsConn) flushLocked() {
	kick := !c.writing && c.err == nil
	c.writing = true
	c.mu.Unlock()
	if kick {
		c.wake()
	}
}

func (c *rlsConn) wake() {
	select {
	case c.kick <- struct{}{}:
	default: // the writer is woken already
	}
}

// write is the connection's writer: woken, it writes the queued frames, and
// those queued while it writes, in as few writes as they take.
func (c *rlsConn) write() {
	for range c.kick {
		runtime.Gosched() // let the callers woken with this one queue theirs
		c.mu.Lock()
		for len(c.wbuf) > 0 && c.err == nil {
			buf := c.wbuf
			c.wbuf = c.spare[:0]
			c.mu.Unlock()
			_, err := c.conn.Write(buf)
			c.mu.Lock()
			c.spare = buf
			if err != nil {
				c.failLocked(fmt.Errorf("write: %w", err))
			}
		}
		c.writing = false
		failed := c.err != nil
		c.mu.Unlock()
		if failed {
			return
		}
	}
}

// fail closes the connection: every call in flight gets err, and so does
// every later send.
func (c *rlsConn) fail(err error) {
	c.mu.Lock()
	c.failLocked(err)
	c.mu.Unlock()
}

func (c *rlsConn) failLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	c.conn.Close()
	for id, call := range c.pending {
		call.done <- err
		delete(c.pending, id)
	}
	c.more.Broadcast()
	c.wake()
}

// finish hands stream id's answer (or err) to its caller.
func (c *rlsConn) finish(id uint32, err error) {
	c.mu.Lock()
	if call, ok := c.pending[id]; ok {
		delete(c.pending, id)
		call.done <- err
	}
	c.mu.Unlock()
}

func (c *rlsConn) read() {
	err := c.readFrames()
	c.fail(err)
}

func (c *rlsConn) readFrames() error {
	var hdr [9]byte
	var p []byte
	for {
		if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		if n > maxFrame {
			return fmt.Errorf("a frame of %d bytes, over the maximum of %d", n, maxFrame)
		}
		if cap(p) < n {
			p = make([]byte, maxFrame)
		}
		p = p[:n]
		if _, err := io.ReadFull(c.r, p); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if err := c.frame(hdr[3], hdr[4], binary.BigEndian.Uint32(hdr[5:])&maxStreamID, p); err != nil {
			return err
		}
	}
}

var errFrame = errors.New("malformed frame")

// frame handles one frame from the server.
func (c *rlsConn) frame(typ, flags byte, id uint32, p []byte) error {
	switch typ {
	case frameData:
		c.grant(len(p))
		p, ok := unpad(flags, p)
		if !ok {
			return errFrame
		}
		c.mu.Lock()
		if call := c.pending[id]; call != nil {
			call.body = append(call.body, p...)
		}
		c.mu.Unlock()
		if flags&flagEndStream != 0 {
			c.finish(id, nil)
		}
	case frameHeaders:
		p, ok := unpad(flags, p)
		if flags&flagPriority != 0 && ok {
			ok, p = len(p) >= 5, p[min(len(p), 5):]
		}
		if !ok {
			return errFrame
		}
		c.block, c.blockID, c.blockEnd = append(c.block[:0], p...), id, flags&flagEndStream != 0
		if flags&flagEndHeaders != 0 {
			return c.headers()
		}
	case frameContinuation:
		if id != c.blockID {
			return errFrame
		}
		c.block = append(c.block, p...)
		if flags&flagEndHeaders != 0 {
			return c.headers()
		}
	case frameRSTStream:
		if len(p) != 4 {
			return errFrame
		}
		c.finish(id, fmt.Errorf("stream reset by the server: error code %d", binary.BigEndian.Uint32(p)))
	case frameSettings:
		return c.settings(flags, p)
	case framePing:
		if flags&flagAck == 0 {
			c.control(framePing, flagAck, p)
		}
	case frameGoAway:
		if len(p) < 8 {
			return errFrame
		}
		return fmt.Errorf("GOAWAY from the server: error code %d %q", binary.BigEndian.Uint32(p[4:8]), p[8:])
	case frameWindowUpdate:
		if len(p) != 4 {
			return errFrame
		}
		if id == 0 {
			c.mu.Lock()
			c.window += int64(binary.BigEndian.Uint32(p) & maxStreamID)
			c.more.Broadcast()
			c.mu.Unlock()
		}
	}
	return nil
}

// unpad strips a padded frame's padding.
func unpad(flags byte, p []byte) ([]byte, bool) {
	if flags&flagPadded == 0 {
		return p, true
	}
	if len(p) == 0 || int(p[0]) >= len(p) {
		return nil, false
	}
	return p[1 : len(p)-int(p[0])], true
}

// grant gives n received bytes back to the server's connection window, in
// large steps.
func (c *rlsConn) grant(n int) {
	c.unacked += int64(n)
	if c.unacked >= recvWindow/2 {
		c.control(frameWindowUpdate, 0, binary.BigEndian.AppendUint32(nil, uint32(c.unacked)))
		c.unacked = 0
	}
}

func (c *rlsConn) settings(flags byte, p []byte) error {
	if flags&flagAck != 0 {
		return nil
	}
	if len(p)%6 != 0 {
		return errFrame
	}
	for ; len(p) > 0; p = p[6:] {
		if binary.BigEndian.Uint16(p) == settingInitialWindowSize {
			c.mu.Lock()
			c.streamW = int64(binary.BigEndian.Uint32(p[2:]))
			c.mu.Unlock()
		}
	}
	c.control(frameSettings, flagAck, nil)
	return nil
}

// headers decodes a complete header block (every one, to keep HPACK's
// table in step with the server's) into its call, and finishes the call if
// the block ended the stream.
func (c *rlsConn) headers() error {
	c.mu.Lock()
	c.cur = c.pending[c.blockID]
	_, err := c.dec.Write(c.block)
	if err == nil {
		err = c.dec.Close()
	}
	c.cur = nil
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("HPACK: %w", err)
	}
	if c.blockEnd {
		c.finish(c.blockID, nil)
	}
	return nil
}

// emit is the HPACK decoder's: it keeps the fields the answer's check
// reads. It runs with mu held.
func (c *rlsConn) emit(f hpack.HeaderField) {
	if c.cur == nil {
		return
	}
	switch f.Name {
	case ":status":
		c.cur.status = f.Value
	case "grpc-status":
		c.cur.grpcStatus = f.Value
	case "grpc-message":
		c.cur.grpcMessage = f.Value
	}
}
