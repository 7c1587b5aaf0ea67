package redisstore

import (
	"context"
	"slices"
	"testing"
)

// The packed integers read back in Redis' Lua as they were written, at
// every boundary of the encoding and for arrays of every header size.
func TestPackedIntegersRoundTripThroughLua(t *testing.T) {
	c, _ := luaRedis(t)
	edges := []int64{0, 1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1764480000123456, 1 << 53,
		-1, -32, -33, -128, -129, -1 << 40, -1 << 53}
	for _, n := range []int{0, 1, 15, 16, 65535, 65536} {
		want := make([]int64, n)
		for i := range want {
			want[i] = edges[i%len(edges)]
		}
		b := appendArray(nil, n)
		for _, v := range want {
			b = appendInt(b, v)
		}
		got, err := c.Eval(context.Background(), "return cmsgpack.unpack(ARGV[1])", nil, string(b)).Int64Slice()
		if err != nil {
			t.Fatalf("%d values: %v", n, err)
		}
		if len(got) == 0 {
			got = []int64{}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%d values: Lua read %v, want %v", n, head(got), head(want))
		}
	}
}

func head(v []int64) []int64 { return v[:min(len(v), 20)] }
