package redisstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// Results written by the Lua (put_result) read back as they were decided,
// in both of their forms and at the edges of every value, and widen turns
// them into the 5 values per item that reservation records keep.
func TestResultsRoundTripThroughLua(t *testing.T) {
	c, lib := luaRedis(t)
	// Per item: allowed, toolarge, remaining, retry µs, reset µs.
	wide := []int64{
		1, 0, 0, 0, 0,
		1, 0, 1 << 53, 0, 1 << 52,
		0, 0, 0, 1, 1 << 52,
		0, 1, 1 << 53, 0, 7,
		1, 0, 5, 1 << 52, 9, // allowed with a retry: no algorithm decides it, but it must stay exact
		1, 1, 3, 4, 5,
	}
	b := appendArray(nil, len(wide))
	for _, v := range wide {
		b = appendInt(b, v)
	}
	const encode = `
local w, reply, r = cmsgpack.unpack(ARGV[1]), {}, 0
for i = 1, #w, 5 do
  r = put_result(reply, r, w[i], w[i + 1], w[i + 2], w[i + 3], w[i + 4])
end
if ARGV[2] == 'widen' then
  local out, all = widen(reply, 0, #w / 5)
  out[#out + 1] = all and 1 or 0
  return out
end
return reply`
	ctx := context.Background()
	reply, err := c.Eval(ctx, lib+encode, nil, string(b), "").Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	items := make([]tokenlimit.Item, len(wide)/5)
	for i := range items {
		items[i].Limit = tokenlimit.TokenBucketLimit(10, 1, time.Second)
	}
	got := make([]tokenlimit.Result, len(items))
	if r, err := readResults(items, got, reply, 0); err != nil || r != len(reply) {
		t.Fatalf("readResults(%v) = %d, %v; want %d, nil", reply, r, err, len(reply))
	}
	for i, res := range got {
		w := wide[5*i : 5*i+5]
		want := tokenlimit.Result{Allowed: w[0] == 1, CostExceedsLimit: w[1] == 1, Limit: 10, Remaining: w[2],
			RetryAfter: time.Duration(w[3]) * time.Microsecond, ResetAfter: time.Duration(w[4]) * time.Microsecond}
		if res != want {
			t.Errorf("item %d: got %+v, want %+v", i, res, want)
		}
	}
	if _, err := readResults(items, got, reply[:len(reply)-1], 0); err == nil {
		t.Errorf("readResults of a truncated reply: no error")
	}
	widened, err := c.Eval(ctx, lib+encode, nil, string(b), "widen").Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(wide), 0); !slices.Equal(widened, want) {
		t.Errorf("widen: got %v, want %v", widened, want)
	}
}
