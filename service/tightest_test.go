package service_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/service"
)

// Decision.Tightest picks the outcome that tokenlimit.Decision.Tightest
// picks among the enforced outcomes' results, ties included.
func TestTightestAgreesWithTokenlimit(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var d service.Decision
		var results []tokenlimit.Result
		var index []int
		for i := range rng.IntN(6) {
			o := service.Outcome{Name: string(rune('a' + i)), Shadow: rng.IntN(3) == 0, Result: tokenlimit.Result{
				Allowed:          rng.IntN(2) == 0,
				CostExceedsLimit: rng.IntN(4) == 0,
				Remaining:        rng.Int64N(3),
				RetryAfter:       time.Duration(rng.IntN(3)),
				ResetAfter:       time.Duration(rng.IntN(3)),
			}}
			d.Limits = append(d.Limits, o)
			if !o.Shadow {
				results, index = append(results, o.Result), append(index, i)
			}
		}
		got, ok := d.Tightest()
		want := tokenlimit.Decision{Results: results}.Tightest()
		switch {
		case want < 0 && ok:
			t.Fatalf("%+v: Tightest found %+v, want none", d.Limits, got)
		case want >= 0 && (!ok || got.Name != d.Limits[index[want]].Name):
			t.Fatalf("%+v: Tightest = %+v, %v, want %+v", d.Limits, got, ok, d.Limits[index[want]])
		}
	}
}
