package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/service"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// tracing exports OpenTelemetry traces over OTLP. It is on only when the
// standard variables name an endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and OTEL_SDK_DISABLED is not true;
// off, newTracing returns nil and nothing is wrapped. The exporters read
// the other OTEL_EXPORTER_OTLP_* variables (headers, timeout, TLS), the
// SDK OTEL_TRACES_SAMPLER and OTEL_BSP_*, the resource OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES. Spans never hold a store key, a descriptor's
// value or a secret.
type tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
}

// traceProtocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL, else the specification's default
// http/protobuf.
func traceProtocol(getenv func(string) string) string {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" {
			return p
		}
	}
	return "http/protobuf"
}

// tracingOn reports whether the environment asks for traces.
func tracingOn(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// newTracing builds the exporter the environment asks for (nil, nil when
// tracing is off); stop it with shutdown.
func newTracing(ctx context.Context, getenv func(string) string, version string) (*tracing, error) {
	if !tracingOn(getenv) {
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	switch p := traceProtocol(getenv); p {
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not supported; want http/protobuf or grpc: %w", p, errUsage)
	}
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName("tokenlimit"), semconv.ServiceVersion(version)),
		resource.Environment(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &tracing{
		provider: provider,
		tracer:   provider.Tracer("github.com/tokenlimit/tokenlimit"),
		prop:     propagation.TraceContext{},
	}, nil
}

// startTracing starts tracing if the process environment asks for it.
func startTracing(ctx context.Context, log *slog.Logger) (*tracing, error) {
	t, err := newTracing(ctx, os.Getenv, buildVersion(debug.ReadBuildInfo()).Version)
	if t != nil {
		log.Info("tracing", "protocol", traceProtocol(os.Getenv))
	}
	return t, err
}

// stopTracing flushes the spans not yet exported and logs a failure.
func stopTracing(t *tracing, log *slog.Logger) {
	if err := t.shutdown(); err != nil {
		log.Warn("flushing traces failed", "error", err)
	}
}

// shutdown flushes the spans not yet exported, within 5 s. A nil t does
// nothing.
func (t *tracing) shutdown() error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return t.provider.Shutdown(ctx)
}

// serviceTracer is the service's Tracer; nil when tracing is off.
func (t *tracing) serviceTracer() service.Tracer {
	if t == nil {
		return nil
	}
	return decisionTracer{t.tracer}
}

type decisionTracer struct{ tracer trace.Tracer }

func (d decisionTracer) StartDecision(ctx context.Context, op string) (context.Context, service.DecisionSpan) {
	ctx, span := d.tracer.Start(ctx, "tokenlimit."+op, trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, decisionSpan{span}
}

type decisionSpan struct{ span trace.Span }

// EndDecision records the outcome: whether admitted, why not, how many
// limits, the name of the limit that denied (a configuration name, never a
// key or a descriptor's value).
func (d decisionSpan) EndDecision(o service.TracedOutcome) {
	defer d.span.End()
	if o.Err != nil {
		d.span.SetStatus(codes.Error, o.Err.Error())
		return
	}
	if o.Settle != "" {
		d.span.SetAttributes(attribute.String("tokenlimit.settle.status", o.Settle))
		return
	}
	attrs := []attribute.KeyValue{
		attribute.Bool("tokenlimit.allowed", o.Allowed),
		attribute.Int("tokenlimit.limits", o.Limits),
	}
	if o.Unavailable {
		attrs = append(attrs, attribute.Bool("tokenlimit.unavailable", true))
	}
	if o.KeySpaceFull {
		attrs = append(attrs, attribute.Bool("tokenlimit.key_space_full", true))
	}
	if o.Denied != "" {
		attrs = append(attrs, attribute.String("tokenlimit.denied_by", o.Denied))
	}
	if o.Reserved || o.Replayed {
		attrs = append(attrs, attribute.Bool("tokenlimit.reserved", o.Reserved), attribute.Bool("tokenlimit.replayed", o.Replayed))
	}
	d.span.SetAttributes(attrs...)
}

// handler gives each request a server span, child of the W3C trace
// context (traceparent, tracestate) the request carries, so that the
// decision's span and the proxy's upstream call are its children. It
// records the method, the path (never the query) and the status. A nil t
// returns h.
func (t *tracing) handler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
	})
}

// statusWriter remembers the status written; Unwrap keeps Flush and the
// other optional interfaces reachable through http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush flushes if the wrapped writer can (streams use http.Flusher).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// grpcOptions is the gRPC server's interceptors taking the W3C trace
// context from each call's metadata; none when t is nil.
func (t *tracing) grpcOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	extract := func(ctx context.Context) context.Context {
		md, ok := metadata.FromIncomingContext(ctx)
		if !ok {
			return ctx
		}
		return t.prop.Extract(ctx, metadataCarrier(md))
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(extract(ctx), req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, tracedStream{ss, extract(ss.Context())})
		}),
	}
}

type tracedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s tracedStream) Context() context.Context { return s.ctx }

// metadataCarrier reads gRPC metadata as a propagation.TextMapCarrier.
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// transport wraps the proxy's upstream transport: each upstream call gets
// a client span, child of the request's, whose context goes upstream in
// traceparent. A nil t returns rt.
func (t *tracing) transport(rt http.RoundTripper) http.RoundTripper {
	if t == nil {
		return rt
	}
	return tracedTransport{t: t, next: rt}
}

type tracedTransport struct {
	t    *tracing
	next http.RoundTripper
}

func (tt tracedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, span := tt.t.tracer.Start(r.Context(), "tokenlimit.upstream", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("server.address", r.URL.Hostname()),
			attribute.String("url.path", r.URL.Path), // never the query: it may hold a key
		))
	defer span.End()
	r = r.Clone(ctx)
	tt.t.prop.Inject(ctx, propagation.HeaderCarrier(r.Header))
	resp, err := tt.next.RoundTrip(r)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, resp.Status)
	}
	return resp, nil
}

// store wraps st so that each call to it gets a span with the number of
// items; a nil t returns st. The wrapper keeps what the service asks of
// a store besides tokenlimit.Store: Describe, LogEntries, and Len/MaxKeys
// when st has them.
func (t *tracing) store(st tokenlimit.Store) tokenlimit.Store {
	if t == nil {
		return st
	}
	ts := tracedStore{Store: st, tracer: t.tracer}
	if kc, ok := st.(keyCounter); ok {
		return countingTracedStore{ts, kc}
	}
	return ts
}

// keyCounter is what the service's key metrics ask of a store.
type keyCounter interface {
	Len() int
	MaxKeys() int
}

type countingTracedStore struct {
	tracedStore
	keyCounter
}

type tracedStore struct {
	tokenlimit.Store
	tracer trace.Tracer
}

// start begins a store call's span. On the Redis store the span also gets
// tokenlimit.store.batch: how many jobs the Redis call that made this one
// carried (the largest, for a Cluster call over several slots; absent when
// the store made no batched call).
func (s tracedStore) start(ctx context.Context, op string, items int) (context.Context, trace.Span) {
	ctx, span := s.tracer.Start(ctx, "tokenlimit.store."+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("tokenlimit.store", tokenlimit.Describe(s.Store).Name),
			attribute.Int("tokenlimit.store.items", items),
		))
	largest := 0
	return redisstore.WithBatchObserver(ctx, func(jobs int) {
		if jobs > largest {
			largest = jobs
			span.SetAttributes(attribute.Int("tokenlimit.store.batch", jobs))
		}
	}), span
}

func endStore(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (s tracedStore) Describe() tokenlimit.StoreInfo { return tokenlimit.Describe(s.Store) }

func (s tracedStore) Check(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	ctx, span := s.start(ctx, "check", len(items))
	at, err := s.Store.Check(ctx, now, items, results)
	endStore(span, err)
	return at, err
}

func (s tracedStore) Adjust(ctx context.Context, now time.Time, adjustments []tokenlimit.Adjustment) error {
	ctx, span := s.start(ctx, "adjust", len(adjustments))
	err := s.Store.Adjust(ctx, now, adjustments)
	endStore(span, err)
	return err
}

func (s tracedStore) Reset(ctx context.Context, key string, alg tokenlimit.Algorithm) error {
	ctx, span := s.start(ctx, "reset", 1)
	err := s.Store.Reset(ctx, key, alg)
	endStore(span, err)
	return err
}

func (s tracedStore) Reserve(ctx context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	ctx, span := s.start(ctx, "reserve", len(req.Items))
	out, err := storekit.Reserve(ctx, s.Store, now, req, results)
	endStore(span, err)
	return out, err
}

func (s tracedStore) Settle(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	ctx, span := s.start(ctx, "settle", 0)
	st, err := storekit.Settle(ctx, s.Store, now, req)
	endStore(span, err)
	return st, err
}

// LogEntries reads the wrapped store's sliding logs (untraced: an
// inspection, not a decision).
func (s tracedStore) LogEntries(ctx context.Context, key string, limit tokenlimit.Limit, now time.Time) ([]tokenlimit.LogEntry, error) {
	r, ok := s.Store.(tokenlimit.LogReader)
	if !ok {
		return nil, errors.New("store: cannot show sliding logs")
	}
	return r.LogEntries(ctx, key, limit, now)
}
