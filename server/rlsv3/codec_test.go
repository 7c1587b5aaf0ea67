package rlsv3

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/service"
)

// The codec is checked against protobuf itself: a request decodes to what
// proto.Unmarshal makes of it (unknown fields aside), bytes that
// proto.Unmarshal refuses are refused, and a response encodes to the bytes
// of deterministic proto.Marshal.

func randString(r *rand.Rand) string {
	const chars = "abcxyz-_/.:09ÄéЖ€"
	runes := []rune(chars)
	b := make([]rune, r.IntN(12))
	for i := range b {
		b[i] = runes[r.IntN(len(runes))]
	}
	return string(b)
}

func randRequest(r *rand.Rand) *rlspb.RateLimitRequest {
	req := &rlspb.RateLimitRequest{Domain: randString(r), HitsAddend: uint32(r.IntN(3)) * r.Uint32()}
	for range r.IntN(4) {
		d := &commonpb.RateLimitDescriptor{IsNegativeHits: r.IntN(4) == 0}
		for range r.IntN(4) {
			d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: randString(r), Value: randString(r)})
		}
		if r.IntN(3) == 0 {
			d.HitsAddend = wrapperspb.UInt64(uint64(r.IntN(3)) * r.Uint64())
		}
		if r.IntN(3) == 0 {
			d.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: r.Uint32() >> r.IntN(32), Unit: typepb.RateLimitUnit(r.IntN(8) - 1)}
			if r.IntN(2) == 0 {
				d.Limit.UnitMultiplier = wrapperspb.UInt32(uint32(r.IntN(3)))
			}
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// withUnknown appends unknown fields of every wire type to b.
func withUnknown(b []byte) []byte {
	b = protowire.AppendTag(b, 99, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	b = protowire.AppendTag(b, 100, protowire.BytesType)
	b = protowire.AppendString(b, "\xff not utf-8, but unknown")
	b = protowire.AppendTag(b, 101, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 1)
	b = protowire.AppendTag(b, 102, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 1)
	b = protowire.AppendTag(b, 103, protowire.StartGroupType)
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, 103, protowire.EndGroupType)
	// A known field with another wire type is unknown too.
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	return protowire.AppendVarint(b, 5)
}

// checkDecode compares decodeRequest with proto.Unmarshal on b.
func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	var want, got rlspb.RateLimitRequest
	werr := proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, &want)
	gerr := decodeRequest(b, &got)
	switch {
	case (werr == nil) != (gerr == nil):
		t.Fatalf("% x: proto.Unmarshal: %v, decodeRequest: %v", b, werr, gerr)
	case werr == nil && !proto.Equal(&want, &got):
		t.Fatalf("% x:\ndecodeRequest: %v\nproto.Unmarshal: %v", b, &got, &want)
	}
}

func TestDecodeRequestMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b, err := proto.Marshal(randRequest(r))
		if err != nil {
			t.Fatal(err)
		}
		checkDecode(t, b)
		checkDecode(t, withUnknown(b))
		// Fields repeated: the last scalar wins, messages merge.
		checkDecode(t, append(b, b...))
		// Cut short anywhere.
		checkDecode(t, b[:r.IntN(len(b)+1)])
		// One byte changed.
		if len(b) > 0 {
			c := append([]byte(nil), b...)
			c[r.IntN(len(c))] ^= byte(1 + r.IntN(255))
			checkDecode(t, c)
		}
	}
}

func TestDecodeRequestRefusesWhatProtoRefuses(t *testing.T) {
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	msg := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	for name, b := range map[string][]byte{
		"empty":                nil,
		"invalid utf-8":        str(1, "a\xffb"),
		"entry key utf-8":      msg(2, msg(1, str(1, "\xc3"))),
		"entry value utf-8":    msg(2, msg(1, str(2, "\xed\xa0\x80"))),
		"field number 0":       {0x02, 0x00},
		"end group alone":      protowire.AppendTag(nil, 5, protowire.EndGroupType),
		"unterminated group":   protowire.AppendTag(nil, 5, protowire.StartGroupType),
		"varint too long":      {0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"length past the end":  {0x0a, 0x05, 'a'},
		"field number too big": protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3),
		"bad descriptor":       msg(2, []byte{0x0a, 0x09}),
		"bad hits_addend":      msg(2, msg(3, []byte{0x08})),
		"bad override":         msg(2, msg(2, msg(3, []byte{0x08, 0x80}))),
		"wire type 6":          {0x0e},
	} {
		t.Run(name, func(t *testing.T) { checkDecode(t, b) })
	}
}

// FuzzDecodeRequest compares decodeRequest with proto.Unmarshal on any bytes.
func FuzzDecodeRequest(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		b, _ := proto.Marshal(randRequest(r))
		f.Add(b)
		f.Add(withUnknown(b))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecode(t, b) })
}

// checkEncode compares the codec's bytes for resp with deterministic
// proto.Marshal's.
func checkEncode(t *testing.T, resp *rlspb.RateLimitResponse) {
	t.Helper()
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	data, err := Codec().Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	got := data.Materialize()
	data.Free()
	if string(got) != string(want) {
		t.Fatalf("%v:\ncodec      % x\nproto      % x", resp, got, want)
	}
	var back rlspb.RateLimitResponse
	if err := proto.Unmarshal(got, &back); err != nil || !proto.Equal(&back, resp) {
		t.Fatalf("%v: decodes to %v (%v)", resp, &back, err)
	}
}

func randResponse(r *rand.Rand) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_Code(r.IntN(4) - 1)}
	for range r.IntN(4) {
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_Code(r.IntN(3)), LimitRemaining: r.Uint32() >> r.IntN(33)}
		if r.IntN(3) > 0 {
			st.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{Name: randString(r), RequestsPerUnit: r.Uint32() >> r.IntN(33),
				Unit: rlspb.RateLimitResponse_RateLimit_Unit(r.IntN(8) - 1)}
			if r.IntN(2) == 0 {
				st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(r.Uint32() >> r.IntN(33))
			}
		}
		if r.IntN(3) > 0 {
			st.DurationUntilReset = durationpb.New(time.Duration(r.Int64N(2*int64(time.Hour))) - time.Hour/10)
			if r.IntN(5) == 0 {
				st.DurationUntilReset = &durationpb.Duration{Seconds: math.MinInt64, Nanos: math.MinInt32}
			}
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	for range r.IntN(7) {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corepb.HeaderValue{Key: randString(r), Value: randString(r)})
	}
	return resp
}

func TestEncodeResponseMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		checkEncode(t, randResponse(r))
	}
	// Big enough for gRPC's pooled buffers.
	big := &rlspb.RateLimitResponse{}
	for range 200 {
		big.ResponseHeadersToAdd = append(big.ResponseHeadersToAdd, &corepb.HeaderValue{Key: "x-ratelimit-remaining", Value: "1234567890"})
	}
	checkEncode(t, big)
}

// TestEncodeResponseOfDecisions encodes the answers this service builds.
func TestEncodeResponseOfDecisions(t *testing.T) {
	res := func(allowed bool, remaining int64, reset time.Duration) tokenlimit.Result {
		return tokenlimit.Result{Allowed: allowed, Limit: 10, Remaining: remaining, ResetAfter: reset, RetryAfter: reset / 2}
	}
	d := service.Decision{Allowed: false, Limits: []service.Outcome{
		{Name: "a", Key: "a|user=x", Request: 0, Result: res(true, 3, 1500*time.Millisecond)},
		{Name: "b", Key: "b|user=x", Request: 1, Result: res(false, 0, 20*time.Hour)},
		{Name: "s", Key: "s|user=x", Request: 1, Shadow: true, Result: res(false, 0, time.Second)},
	}}
	policies := []service.Policy{{Limit: 10, Window: 5 * time.Second}, {Limit: 10, Window: 2 * time.Hour}, {Limit: 1, Window: time.Second}}
	var limits limitCache
	for n := 1; n <= 3; n++ {
		checkEncode(t, response(d, policies, n, &limits))
	}
	d.Allowed, d.Limits = true, d.Limits[:1]
	checkEncode(t, response(d, policies[:1], 1, &limits))
	checkEncode(t, response(service.Decision{Allowed: true}, nil, 1, &limits))
	checkEncode(t, currentLimitResponse(currentLimit("m", service.Policy{Limit: 5, Calendar: config.Month})))
}

func currentLimitResponse(l *rlspb.RateLimitResponse_RateLimit) *rlspb.RateLimitResponse {
	return &rlspb.RateLimitResponse{Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{CurrentLimit: l}}}
}

// TestEncodeFallsBack: what the encoder does not write goes through
// protobuf, and still encodes exactly.
func TestEncodeFallsBack(t *testing.T) {
	withUnknown := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	withUnknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	meta, err := structpb.NewStruct(map[string]any{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	for _, resp := range []*rlspb.RateLimitResponse{
		withUnknown,
		{RawBody: []byte("x")},
		{DynamicMetadata: meta},
		{RequestHeadersToAdd: []*corepb.HeaderValue{{Key: "k", Value: "v"}}},
		{ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: "k", RawValue: []byte("v")}}},
		{Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Quota: &rlspb.RateLimitResponse_Quota{Requests: 1}}}},
	} {
		if plainResponse(resp) {
			t.Errorf("%v: encoded by hand", resp)
		}
		checkEncode(t, resp)
	}
}

// TestCodecOtherMessages: other messages go through gRPC's protobuf codec.
func TestCodecOtherMessages(t *testing.T) {
	in := wrapperspb.String("hello")
	data, err := Codec().Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out wrapperspb.StringValue
	if err := Codec().Unmarshal(data, &out); err != nil || out.GetValue() != "hello" {
		t.Fatalf("round trip: %v (%v)", &out, err)
	}
	b, _ := proto.Marshal(randRequest(rand.New(rand.NewPCG(7, 8))))
	var req rlspb.RateLimitRequest
	if err := Codec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &req); err != nil {
		t.Fatal(err)
	}
	checkDecode(t, b)
}

// BenchmarkCodec is the codec's work per RPC: decoding a one-descriptor
// request and encoding its answer.
func BenchmarkCodec(b *testing.B) {
	req, _ := proto.Marshal(&rlspb.RateLimitRequest{Domain: "llm", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{
		{Key: "user", Value: "user-1234"}, {Key: "route", Value: "/v1/chat"}}}}})
	d := service.Decision{Allowed: true, Limits: []service.Outcome{{Name: "llm-budget", Key: "k", Result: tokenlimit.Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Second}}}}
	var limits limitCache
	resp := response(d, []service.Policy{{Limit: 10, Window: 5 * time.Second}}, 1, &limits)
	for _, c := range []struct {
		name  string
		codec interface {
			Marshal(any) (mem.BufferSlice, error)
			Unmarshal(mem.BufferSlice, any) error
		}
	}{{"rlsv3", Codec()}, {"proto", Codec().(codec).fallback}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r rlspb.RateLimitRequest
				if err := c.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(req)}, &r); err != nil {
					b.Fatal(err)
				}
				out, err := c.codec.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
		})
	}
}
