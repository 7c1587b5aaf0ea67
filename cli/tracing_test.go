package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver: it decodes each
// export request (protobuf) and keeps its spans.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	arrived chan struct{} // receives after each export, without blocking
}

func newOTLPReceiver(t *testing.T) (*otlpReceiver, *httptest.Server) {
	r := &otlpReceiver{arrived: make(chan struct{}, 1)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var export coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &export)
		}
		if req.URL.Path != "/v1/traces" || err != nil {
			t.Errorf("OTLP export to %s: %v", req.URL.Path, err)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		select {
		case r.arrived <- struct{}{}:
		default:
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return r, srv
}

// waitFor waits until the spans of trace include one named name and
// returns the trace's spans by name.
func (r *otlpReceiver) waitFor(t *testing.T, traceID []byte, name string) map[string]*tracepb.Span {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		r.mu.Lock()
		byName := map[string]*tracepb.Span{}
		for _, s := range r.spans {
			if bytes.Equal(s.TraceId, traceID) {
				byName[s.Name] = s
			}
		}
		r.mu.Unlock()
		if byName[name] != nil {
			return byName
		}
		select {
		case <-r.arrived:
		case <-deadline:
			t.Fatalf("no span %q in trace %x; got %v", name, traceID, byName)
		}
	}
}

// all returns every span received so far.
func (r *otlpReceiver) all() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

func attr(s *tracepb.Span, key string) (string, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.String(), true
		}
	}
	return "", false
}

func wantParent(t *testing.T, child, parent *tracepb.Span) {
	t.Helper()
	if !bytes.Equal(child.ParentSpanId, parent.SpanId) {
		t.Errorf("span %s has parent %x, want %s's %x", child.Name, child.ParentSpanId, parent.Name, parent.SpanId)
	}
}

// postTraced posts a JSON body to url with traceparent (and authorization
// unless "") and wants 200.
func postTraced(t *testing.T, url, body, traceparent, authorization string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s answered %d, want 200", url, resp.StatusCode)
	}
}

const tracedSecret = "sk-tracedsecretvalue"

// TestTracesOverOTLPHTTP: with the standard variables naming an
// OTLP/HTTP endpoint, a check answered by serve is traced as a server span
// under the caller's traceparent, with the decision under it and the store
// call under the decision; the spans carry the outcome and never the
// descriptor's value nor the store key.
func TestTracesOverOTLPHTTP(t *testing.T) {
	recv, srv := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	httpAddr, _ := startServe(t)

	traceID, callerSpan := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	postTraced(t, "http://"+httpAddr+"/v1/check", `{"descriptors":{"user":"`+tracedSecret+`","route":"/v1/chat"}}`,
		"00-"+traceID+"-"+callerSpan+"-01", "")

	id, _ := hex.DecodeString(traceID)
	recv.waitFor(t, id, "POST")
	spans := recv.waitFor(t, id, "tokenlimit.store.check")
	server, decision, store := spans["POST"], spans["tokenlimit.check"], spans["tokenlimit.store.check"]
	if decision == nil {
		t.Fatalf("no decision span; got %v", spans)
	}
	if got := hex.EncodeToString(server.ParentSpanId); got != callerSpan {
		t.Errorf("server span's parent %s, want the caller's %s", got, callerSpan)
	}
	wantParent(t, decision, server)
	wantParent(t, store, decision)
	for key, want := range map[string]string{"tokenlimit.allowed": "bool_value:true", "tokenlimit.limits": "int_value:1"} {
		if got, _ := attr(decision, key); got != want {
			t.Errorf("decision span %s = %q, want %q", key, got, want)
		}
	}
	if got, _ := attr(store, "tokenlimit.store.items"); got != "int_value:1" {
		t.Errorf("store span's items = %q, want 1", got)
	}
	for _, s := range recv.all() {
		if text := s.String(); strings.Contains(text, tracedSecret) {
			t.Errorf("span %s holds the descriptor's value: %s", s.Name, text)
		}
	}
}

// On Redis the store call's span says how many jobs the Redis call that
// made it carried: 1 for a lone check (redisstore.WithBatchObserver).
func TestTracesStoreBatchOnRedis(t *testing.T) {
	recv, srv := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	redis := redistest.Start(t)
	httpAddr, _ := startServe(t, "--redis", redis.URL())

	traceID := "6bf92f3577b34da6a3ce929d0e0e4736"
	postTraced(t, "http://"+httpAddr+"/v1/check", `{"descriptors":{"user":"u1","route":"/v1/chat"}}`,
		"00-"+traceID+"-20f067aa0ba902b7-01", "")
	id, _ := hex.DecodeString(traceID)
	store := recv.waitFor(t, id, "tokenlimit.store.check")["tokenlimit.store.check"]
	if got, _ := attr(store, "tokenlimit.store.batch"); got != "int_value:1" {
		t.Errorf("store span's batch = %q, want 1", got)
	}
	if got, _ := attr(store, "tokenlimit.store"); !strings.Contains(got, "redis") {
		t.Errorf("store span's store = %q, want the Redis store", got)
	}
}

// TestTracesGRPCAndProxy: with the same variables,
// a gRPC call's traceparent metadata parents its decision; the proxy's
// upstream call is a span under the request's, and the upstream receives
// that span's context in traceparent.
func TestTracesGRPCAndProxy(t *testing.T) {
	recv, srv := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")

	t.Run("grpc", func(t *testing.T) {
		_, grpcAddr := startServe(t)
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		traceID, callerSpan := "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
		ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-"+callerSpan+"-01")
		_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "tokenlimit", Descriptors: []*commonpb.RateLimitDescriptor{
			{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: tracedSecret}, {Key: "route", Value: "/v1/chat"}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		id, _ := hex.DecodeString(traceID)
		spans := recv.waitFor(t, id, "tokenlimit.check") // ends after its store call: both are in
		decision := spans["tokenlimit.check"]
		if decision == nil || hex.EncodeToString(decision.ParentSpanId) != callerSpan {
			t.Fatalf("decision span %v, want one whose parent is the caller's %s", decision, callerSpan)
		}
		wantParent(t, spans["tokenlimit.store.check"], decision)
	})

	t.Run("proxy", func(t *testing.T) {
		got := make(chan string, 1)
		upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case got <- r.Header.Get("traceparent"):
			default:
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
		}))
		defer upstream.Close()
		ctx, cancel := context.WithCancel(context.Background())
		logs := newSyncBuffer()
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, []string{"proxy", "--config", "../examples/proxy.yaml", "--upstream", upstream.URL, "--unknown-keys", "default", "--listen", "127.0.0.1:0"}, logs.w, io.Discard)
			logs.w.Close()
		}()
		defer func() { cancel(); <-done }()
		base := "http://" + logs.addr(t, "proxying")
		go func() {
			for range logs.lines {
			}
		}()
		traceID, callerSpan := "6bf92f3577b34da6a3ce929d0e0e4736", "20f067aa0ba902b7"
		postTraced(t, base+"/v1/chat/completions", `{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
			"00-"+traceID+"-"+callerSpan+"-01", "Bearer "+tracedSecret)
		id, _ := hex.DecodeString(traceID)
		recv.waitFor(t, id, "tokenlimit.upstream")
		spans := recv.waitFor(t, id, "POST")
		server, up, reserve := spans["POST"], spans["tokenlimit.upstream"], spans["tokenlimit.reserve"]
		if reserve == nil {
			t.Fatalf("no reserve span; got %v", spans)
		}
		if hex.EncodeToString(server.ParentSpanId) != callerSpan {
			t.Errorf("server span's parent %x, want the caller's %s", server.ParentSpanId, callerSpan)
		}
		wantParent(t, up, server)
		wantParent(t, reserve, server)
		if want := "00-" + traceID + "-" + hex.EncodeToString(up.SpanId) + "-01"; <-got != want {
			t.Errorf("the upstream got another traceparent, want %s", want)
		}
		for _, s := range recv.all() {
			if text := s.String(); strings.Contains(text, tracedSecret) {
				t.Errorf("span %s holds the api key: %s", s.Name, text)
			}
		}
	})
}
