package cli

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

// BenchmarkTracing measures a decision on the memory store untraced (off,
// as serve runs without OTEL_EXPORTER_OTLP_ENDPOINT) and traced (on: every
// span sampled, batched to an exporter that drops them), side by side.
func BenchmarkTracing(b *testing.B) {
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { provider.Shutdown(context.Background()) })
	on := &tracing{provider: provider, tracer: provider.Tracer("bench"), prop: propagation.TraceContext{}}
	for _, v := range []struct {
		name string
		t    *tracing
	}{{"off", nil}, {"on", on}} {
		b.Run(v.name, func(b *testing.B) {
			svc := testkit.NewService(b, testkit.Setup{Store: testkit.Memory, Start: time.Now(),
				Config: testkit.ParseConfig(b, "limits:\n  - {name: rpm, key: [user], algorithm: token_bucket, capacity: 1000000000, refill: 1000000000/s}\n"),
				Edit:   func(o *service.Options) { o.Store, o.Tracer = v.t.store(o.Store), v.t.serviceTracer() }}).Service
			req := service.Request{Descriptors: map[string]string{"user": "alice"}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := svc.Check(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
