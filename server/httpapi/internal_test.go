package httpapi

import (
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

func TestWindowSeconds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		limit tokenlimit.Limit
		want  int64
	}{
		{tokenlimit.TokenBucketLimit(10, 2, time.Second), 5},
		{tokenlimit.TokenBucketLimit(10, 3, time.Second), 4}, // 3.33 s
		{tokenlimit.TokenBucketLimit(1, 1000, time.Second), 1},
		{tokenlimit.GCRALimit(9, 60, time.Minute), 10},
		{tokenlimit.TokenBucketLimit(10000, 1, 24*time.Hour), 10000 * 24 * 3600},
		{tokenlimit.SlidingLogLimit(5, 5*time.Second), 5},
		{tokenlimit.FixedWindowLimit(5, 1500*time.Millisecond), 2},
		{tokenlimit.SlidingCounterLimit(5, time.Millisecond), 1},
	}
	for _, c := range cases {
		if err := c.limit.Validate(); err != nil {
			t.Fatalf("%s: %v", c.limit, err)
		}
		if got := windowSeconds(c.limit); got != c.want {
			t.Errorf("windowSeconds(%s) = %d, want %d", c.limit, got, c.want)
		}
	}
}

func TestSFString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"llm-budget": `"llm-budget"`,
		`a"b\c`:      `"a\"b\\c"`,
		"tab\there":  `"tab?here"`,
		"é":          `"??"`,
	} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}
