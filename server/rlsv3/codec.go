package rlsv3

import (
	"errors"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenlimit/tokenlimit/internal/validutf8"
)

// Codec returns the gRPC codec for a server of the Rate Limit Service
// (grpc.ForceServerCodecV2): the protobuf wire format, as gRPC's own codec,
// with RateLimitRequest decoded and RateLimitResponse encoded by hand
// rather than through protobuf's reflection. A request's strings share one
// allocation, its entries one per descriptor, and a response is written
// into one pooled buffer. Every other message, and a response with fields
// this service never sets, goes through gRPC's protobuf codec.
//
// The request decoder accepts and refuses what proto.Unmarshal does, and
// fills the same fields; unknown fields are dropped instead of kept (the
// service never reads them). The response encoder writes the bytes
// deterministic proto.Marshal writes.
func Codec() encoding.CodecV2 {
	return codec{fallback: encoding.GetCodecV2(protocodec.Name)}
}

type codec struct{ fallback encoding.CodecV2 }

// Name is protobuf's: the codec speaks the same wire format.
func (codec) Name() string { return protocodec.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	resp, ok := v.(*rlspb.RateLimitResponse)
	if !ok || !plainResponse(resp) {
		return c.fallback.Marshal(v)
	}
	size := responseSize(resp)
	if size <= answerInline {
		a := new(answerBytes)
		a.buf = appendResponse(a.data[:0], resp)
		a.slice[0] = &a.buf
		return a.slice[:], nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	*buf = appendResponse((*buf)[:0], resp)
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// answerInline is how many bytes of an answer fit in an answerBytes, which
// is then 320 bytes, one of the allocator's size classes. The usual answer,
// one status with its headers, is about 210 bytes.
const answerInline = 280

// answerBytes holds an encoded answer and the mem.BufferSlice that hands it
// to gRPC in one allocation. A buffer from gRPC's pool would cost more: one
// under mem's pooling threshold (1 KiB), as answers are, is never put back,
// so each Get allocates the bytes and their handle, and mem.NewBuffer puts
// the slice in an interface, a third allocation. Here the interface holds a
// pointer to buf, which allocates nothing; freeing it does nothing, and the
// collector takes the block once gRPC has written it.
type answerBytes struct {
	slice [1]mem.Buffer
	buf   mem.SliceBuffer // data[:n], what slice[0] points at
	data  [answerInline]byte
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*rlspb.RateLimitRequest)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return decodeRequest(buf.ReadOnlyData(), req)
}

// Decoding.

var (
	errWire = errors.New("proto: cannot parse invalid wire-format data")
	errUTF8 = errors.New("proto: string field contains invalid UTF-8")
)

// fields iterates over the fields of the message at b[start:end] of a
// request: next reads each field's number and type, and its varint (a
// varint field) or the offsets of its bytes (a length-delimited one); a
// field of another type is skipped. err is set when the bytes are not a
// message.
type fields struct {
	b           []byte
	pos, end    int
	num         protowire.Number
	typ         protowire.Type
	varint      uint64
	start, stop int // of a length-delimited field's bytes, in b
	err         error
}

func newFields(b []byte, start, end int) fields {
	return fields{b: b, pos: start, end: end}
}

// next reads the next field; false at the end or on an error.
func (f *fields) next() bool {
	if f.pos >= f.end || f.err != nil {
		return false
	}
	b := f.b[f.pos:f.end]
	var tag uint64
	n := 1
	if b[0] < 0x80 {
		tag = uint64(b[0])
	} else if tag, n = protowire.ConsumeVarint(b); n < 0 {
		return f.fail()
	}
	f.num, f.typ = protowire.Number(tag>>3), protowire.Type(tag&7)
	if tag>>3 < uint64(protowire.MinValidNumber) || tag>>3 > uint64(protowire.MaxValidNumber) {
		return f.fail()
	}
	b = b[n:]
	f.pos += n
	switch f.typ {
	case protowire.VarintType:
		if len(b) > 0 && b[0] < 0x80 {
			f.varint, n = uint64(b[0]), 1
		} else {
			f.varint, n = protowire.ConsumeVarint(b)
		}
	case protowire.BytesType:
		var size uint64
		if len(b) > 0 && b[0] < 0x80 {
			size, n = uint64(b[0]), 1
		} else {
			size, n = protowire.ConsumeVarint(b)
		}
		if n >= 0 {
			if size > uint64(len(b)-n) {
				return f.fail()
			}
			f.start = f.pos + n
			f.stop = f.start + int(size)
			n += int(size)
		}
	default:
		n = protowire.ConsumeFieldValue(f.num, f.typ, b)
	}
	if n < 0 {
		return f.fail()
	}
	f.pos += n
	return true
}

func (f *fields) fail() bool {
	f.err = errWire
	return false
}

// is reports whether the field read is number num of type typ; a field
// of the same number and another type is an unknown field, as protobuf
// has it.
func (f *fields) is(num protowire.Number, typ protowire.Type) bool {
	return f.num == num && f.typ == typ
}

// count returns how many fields numbered num, length-delimited, the
// message at b[start:end] has.
func count(b []byte, start, end int, num protowire.Number) (int, error) {
	n := 0
	for f := newFields(b, start, end); ; {
		if !f.next() {
			return n, f.err
		}
		if f.is(num, protowire.BytesType) {
			n++
		}
	}
}

// decoder decodes one request: b its bytes and s the same as one string,
// which the request's strings are cut from.
type decoder struct {
	b     []byte
	s     string
	block *oneDescriptor // the common request's messages, or nil
}

// oneDescriptor holds the messages of a request with one descriptor of at
// most four entries, the common case, in one allocation.
type oneDescriptor struct {
	descs     [1]commonpb.RateLimitDescriptor
	descPtrs  [1]*commonpb.RateLimitDescriptor
	entries   [4]commonpb.RateLimitDescriptor_Entry
	entryPtrs [4]*commonpb.RateLimitDescriptor_Entry
}

// str returns the bytes of the field f read as a string, refusing invalid
// UTF-8 as proto3 strings do.
func (d *decoder) str(f *fields) (string, error) {
	v := d.s[f.start:f.stop]
	if !validutf8.String(v) {
		return "", errUTF8
	}
	return v, nil
}

// decodeRequest decodes b into req, as proto.Unmarshal would but for
// unknown fields, which it drops.
func decodeRequest(b []byte, req *rlspb.RateLimitRequest) error {
	req.Reset()
	n, err := count(b, 0, len(b), 2)
	if err != nil {
		return err
	}
	d := &decoder{b: b, s: string(b)}
	var descs []commonpb.RateLimitDescriptor
	switch {
	case n == 1:
		d.block = new(oneDescriptor)
		descs, req.Descriptors = d.block.descs[:], d.block.descPtrs[:0]
	case n > 1:
		descs, req.Descriptors = make([]commonpb.RateLimitDescriptor, n), make([]*commonpb.RateLimitDescriptor, 0, n)
	}
	f := newFields(b, 0, len(b))
	for f.next() {
		switch {
		case f.is(1, protowire.BytesType):
			req.Domain, err = d.str(&f)
		case f.is(2, protowire.BytesType):
			desc := &descs[len(req.Descriptors)]
			req.Descriptors = append(req.Descriptors, desc)
			err = d.descriptor(f.start, f.stop, desc)
		case f.is(3, protowire.VarintType):
			req.HitsAddend = uint32(f.varint)
		}
		if err != nil {
			return err
		}
	}
	return f.err
}

// descriptor decodes the descriptor at b[start:end] into desc.
func (d *decoder) descriptor(start, end int, desc *commonpb.RateLimitDescriptor) error {
	n, err := count(d.b, start, end, 1)
	if err != nil {
		return err
	}
	var entries []commonpb.RateLimitDescriptor_Entry
	switch {
	case n > 0 && d.block != nil && n <= len(d.block.entries):
		entries, desc.Entries = d.block.entries[:], d.block.entryPtrs[:0:n]
	case n > 0:
		entries, desc.Entries = make([]commonpb.RateLimitDescriptor_Entry, n), make([]*commonpb.RateLimitDescriptor_Entry, 0, n)
	}
	f := newFields(d.b, start, end)
	for f.next() {
		switch {
		case f.is(1, protowire.BytesType):
			e := &entries[len(desc.Entries)]
			desc.Entries = append(desc.Entries, e)
			err = d.entry(f.start, f.stop, e)
		case f.is(2, protowire.BytesType):
			if desc.Limit == nil {
				desc.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{}
			}
			err = d.override(f.start, f.stop, desc.Limit)
		case f.is(3, protowire.BytesType):
			if desc.HitsAddend == nil {
				desc.HitsAddend = &wrapperspb.UInt64Value{}
			}
			var v uint64
			v, err = d.wrapped(f.start, f.stop, desc.HitsAddend.Value)
			desc.HitsAddend.Value = v
		case f.is(4, protowire.VarintType):
			desc.IsNegativeHits = f.varint != 0
		}
		if err != nil {
			return err
		}
	}
	return f.err
}

func (d *decoder) entry(start, end int, e *commonpb.RateLimitDescriptor_Entry) error {
	var err error
	f := newFields(d.b, start, end)
	for f.next() {
		switch {
		case f.is(1, protowire.BytesType):
			e.Key, err = d.str(&f)
		case f.is(2, protowire.BytesType):
			e.Value, err = d.str(&f)
		}
		if err != nil {
			return err
		}
	}
	return f.err
}

// override decodes the limit override at b[start:end], merging into o as
// protobuf merges a singular message that appears more than once.
func (d *decoder) override(start, end int, o *commonpb.RateLimitDescriptor_RateLimitOverride) error {
	f := newFields(d.b, start, end)
	for f.next() {
		switch {
		case f.is(1, protowire.VarintType):
			o.RequestsPerUnit = uint32(f.varint)
		case f.is(2, protowire.VarintType):
			o.Unit = typepb.RateLimitUnit(int32(f.varint))
		case f.is(3, protowire.BytesType):
			if o.UnitMultiplier == nil {
				o.UnitMultiplier = &wrapperspb.UInt32Value{}
			}
			v, err := d.wrapped(f.start, f.stop, uint64(o.UnitMultiplier.Value))
			if err != nil {
				return err
			}
			o.UnitMultiplier.Value = uint32(v)
		}
	}
	return f.err
}

// wrapped decodes the value of a UInt64Value or UInt32Value at
// b[start:end], merged into v.
func (d *decoder) wrapped(start, end int, v uint64) (uint64, error) {
	f := newFields(d.b, start, end)
	for f.next() {
		if f.is(1, protowire.VarintType) {
			v = f.varint
		}
	}
	return v, f.err
}

// Encoding.

// plainResponse reports whether resp sets only what appendResponse writes:
// the overall code, statuses (code, current limit, remaining, reset) and
// response headers (key and value), with no unknown fields.
func plainResponse(resp *rlspb.RateLimitResponse) bool {
	if resp == nil || resp.RequestHeadersToAdd != nil || resp.RawBody != nil || resp.DynamicMetadata != nil || resp.Quota != nil ||
		unknown(resp.ProtoReflect().GetUnknown()) {
		return false
	}
	for _, st := range resp.Statuses {
		if st == nil || st.Quota != nil || unknown(st.ProtoReflect().GetUnknown()) {
			return false
		}
		if l := st.CurrentLimit; l != nil && (unknown(l.ProtoReflect().GetUnknown()) ||
			(l.UnitMultiplier != nil && unknown(l.UnitMultiplier.ProtoReflect().GetUnknown()))) {
			return false
		}
		if r := st.DurationUntilReset; r != nil && unknown(r.ProtoReflect().GetUnknown()) {
			return false
		}
	}
	for _, h := range resp.ResponseHeadersToAdd {
		if h == nil || h.RawValue != nil || unknown(h.ProtoReflect().GetUnknown()) {
			return false
		}
	}
	return true
}

func unknown(b []byte) bool { return len(b) > 0 }

// Sizes of what appendResponse writes.

func varintField(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func bytesField(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(n)
}

// messageField is the size of a message field whose message is n bytes.
func messageField(n int) int { return 1 + protowire.SizeBytes(n) }

func responseSize(r *rlspb.RateLimitResponse) int {
	n := varintField(uint64(r.OverallCode))
	for _, st := range r.Statuses {
		n += messageField(statusSize(st))
	}
	for _, h := range r.ResponseHeadersToAdd {
		n += messageField(headerSize(h))
	}
	return n
}

func statusSize(st *rlspb.RateLimitResponse_DescriptorStatus) int {
	n := varintField(uint64(st.Code))
	if st.CurrentLimit != nil {
		n += messageField(rateLimitSize(st.CurrentLimit))
	}
	n += varintField(uint64(st.LimitRemaining))
	if st.DurationUntilReset != nil {
		n += messageField(durationSize(st.DurationUntilReset))
	}
	return n
}

func rateLimitSize(l *rlspb.RateLimitResponse_RateLimit) int {
	n := varintField(uint64(l.RequestsPerUnit)) + varintField(uint64(l.Unit)) + bytesField(len(l.Name))
	if l.UnitMultiplier != nil {
		n += messageField(varintField(uint64(l.UnitMultiplier.Value)))
	}
	return n
}

func durationSize(d *durationpb.Duration) int {
	return varintField(uint64(d.Seconds)) + varintField(uint64(int64(d.Nanos)))
}

func headerSize(h *corepb.HeaderValue) int {
	return bytesField(len(h.Key)) + bytesField(len(h.Value))
}

// Writers, in field-number order as proto.Marshal writes.

// The fields written are numbered below 16: their tags are one byte.

func appendTag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	return append(b, byte(num)<<3|byte(typ))
}

func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(appendTag(b, num, protowire.VarintType), v)
}

func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return append(appendVarint(appendTag(b, num, protowire.BytesType), uint64(len(s))), s...)
}

func appendMessageHeader(b []byte, num protowire.Number, size int) []byte {
	return appendVarint(appendTag(b, num, protowire.BytesType), uint64(size))
}

func appendResponse(b []byte, r *rlspb.RateLimitResponse) []byte {
	b = appendVarintField(b, 1, uint64(r.OverallCode))
	for _, st := range r.Statuses {
		b = appendStatus(appendMessageHeader(b, 2, statusSize(st)), st)
	}
	for _, h := range r.ResponseHeadersToAdd {
		b = appendMessageHeader(b, 3, headerSize(h))
		b = appendStringField(b, 1, h.Key)
		b = appendStringField(b, 2, h.Value)
	}
	return b
}

func appendStatus(b []byte, st *rlspb.RateLimitResponse_DescriptorStatus) []byte {
	b = appendVarintField(b, 1, uint64(st.Code))
	if l := st.CurrentLimit; l != nil {
		b = appendMessageHeader(b, 2, rateLimitSize(l))
		b = appendVarintField(b, 1, uint64(l.RequestsPerUnit))
		b = appendVarintField(b, 2, uint64(l.Unit))
		b = appendStringField(b, 3, l.Name)
		if m := l.UnitMultiplier; m != nil {
			b = appendMessageHeader(b, 4, varintField(uint64(m.Value)))
			b = appendVarintField(b, 1, uint64(m.Value))
		}
	}
	b = appendVarintField(b, 3, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		b = appendMessageHeader(b, 4, durationSize(d))
		b = appendVarintField(b, 1, uint64(d.Seconds))
		b = appendVarintField(b, 2, uint64(int64(d.Nanos)))
	}
	return b
}
