package redisstore

import (
	"context"
	"math/rand/v2"
	"testing"
)

// The Lua's floor and ceil divisions (lib.lua's fdiv and cdiv, which the
// hot paths write inline) agree with integer division wherever the
// algorithms use them, |a| + b <= 2^53: at the edges where a rounded
// quotient comes nearest an integer, and at random magnitudes, of either
// sign.
func TestLuaDivisionIsExact(t *testing.T) {
	c, lib := luaRedis(t)
	const top = int64(1) << 53
	var pairs []int64
	add := func(a, b int64) {
		if a >= 0 && b > 0 && a+b <= top {
			pairs = append(pairs, a, b, -a, b)
		}
	}
	for _, b := range []int64{1, 2, 3, 7, 1000, 1_000_000, 999_999_937, 1<<26 + 1, 1<<52 + 1, top - 1} {
		for _, q := range []int64{0, 1, 2, top/b - 1, top / b, top/b + 1} {
			for _, d := range []int64{-1, 0, 1} {
				add(q*b+d, b)
			}
		}
		add(top-b, b)
		add(top-b-1, b)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		a := rng.Int64N(top >> rng.IntN(53))
		add(a, 1+rng.Int64N(max(1, (top-a)>>rng.IntN(53))))
	}
	b := appendArray(nil, len(pairs))
	for _, v := range pairs {
		b = appendInt(b, v)
	}
	const divide = `
local p, out = cmsgpack.unpack(ARGV[1]), {}
for i = 1, #p, 2 do
  out[i], out[i + 1] = fdiv(p[i], p[i + 1]), cdiv(p[i], p[i + 1])
end
return out`
	got, err := c.Eval(context.Background(), lib+divide, nil, string(b)).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(pairs) {
		t.Fatalf("%d results for %d pairs", len(got), len(pairs)/2)
	}
	for i := 0; i < len(pairs); i += 2 {
		a, d := pairs[i], pairs[i+1]
		floor, ceil := a/d, a/d // Go's / truncates toward zero
		if a%d != 0 && a < 0 {
			floor--
		}
		if a%d != 0 && a > 0 {
			ceil++
		}
		if got[i] != floor || got[i+1] != ceil {
			t.Errorf("%d / %d: Lua floor %d ceil %d, want %d and %d", a, d, got[i], got[i+1], floor, ceil)
		}
	}
}
