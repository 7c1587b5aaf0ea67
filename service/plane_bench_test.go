package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/service"
)

const benchPlaneYAML = `
api_keys:
  sk-yaml: {tenant: acme, plan: pro}
plans:
  pro: {daily: 1000000000}
limits:
  - {name: key-rpm, key: [api_key], algorithm: fixed_window, limit: 1000000000/min}
  - {name: team-rpm, key: [tenant], algorithm: fixed_window, limit: 1000000000/min}
`

// BenchmarkCheckThreeLimits decides a call under three limits (the key's,
// the team's, the plan's), given in the YAML file or by the plane: the
// difference is the plane's cost on the hot path (a SHA-256 of the secret,
// two cache reads, the descriptors copied).
func BenchmarkCheckThreeLimits(b *testing.B) {
	for _, variant := range []string{"yaml", "plane"} {
		b.Run(variant, func(b *testing.B) {
			var svc *service.Service
			p, err := plane.Open(context.Background(), plane.NewMemoryStore(), plane.Options{KnownPlan: func(n string) bool { return svc.KnownPlan(n) }})
			if err != nil {
				b.Fatal(err)
			}
			te := testkit.NewService(b, testkit.Setup{Store: testkit.Memory, Config: testkit.ParseConfig(b, benchPlaneYAML), Start: time.Now(), Clock: time.Now,
				Edit: func(o *service.Options) { o.Plane = p }})
			svc = te.Service
			secret := "sk-yaml"
			if variant == "plane" {
				ctx := context.Background()
				if _, err := p.CreateTeam(ctx, plane.Spec{Name: "acme", Plan: "pro", Limits: []byte(`[{"name": "team-rpm", "algorithm": "fixed_window", "limit": "1000000000/min"}]`)}); err != nil {
					b.Fatal(err)
				}
				if _, secret, err = p.CreateKey(ctx, plane.Spec{Name: "k", Team: "acme", Limits: []byte(`[{"name": "key-rpm", "algorithm": "fixed_window", "limit": "1000000000/min"}]`)}); err != nil {
					b.Fatal(err)
				}
			}
			req := service.Request{Descriptors: map[string]string{"api_key": secret}}
			if d, err := svc.Check(context.Background(), req); err != nil || !d.Allowed || len(d.Limits) != 3 {
				b.Fatalf("%+v, %v: want allowed under three limits", d, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := svc.Check(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
