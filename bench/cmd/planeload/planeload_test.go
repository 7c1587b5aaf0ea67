package main

import (
	"context"
	"io"
	"math"
	"testing"
	"time"
)

// TestPlaneLookupAddsNoCommand: decisions made with plane keys send Redis
// exactly the commands that the same three limits from YAML send, one
// decision at a time (the store batches nothing then), but for those that
// follow time rather than decisions: the replica following the stream (an
// XREAD, and a GET when it times out: a few a second, and a busy machine
// stretches the turns) and the clients' keep-alive PINGs (every client's
// connections at once, and no PING reads anything: left out). A lookup
// that went to Redis would add one command per decision: 300 here.
func TestPlaneLookupAddsNoCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := options{redisServer: "redis-server", keys: 300, yamlKeys: 100, teams: 10, callers: 4, runs: 1, slice: 50 * time.Millisecond, sequential: 300}
	e, err := setUp(ctx, o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	turns, err := sequential(ctx, e, o)
	if err != nil {
		t.Fatal(err)
	}
	yaml, plane := turns[0].commands, turns[1].commands
	if yaml["fcall"].calls+yaml["evalsha"].calls < int64(o.sequential) {
		t.Fatalf("yaml: %v for %d decisions: want a script call per decision at least", yaml, o.sequential)
	}
	// 3, and 2 a second of the two turns: far below 300.
	slack := 3 + 2*int64(math.Ceil((turns[0].elapsed+turns[1].elapsed).Seconds()))
	for _, cmds := range []map[string]cmdStat{yaml, plane} {
		for cmd := range cmds {
			if cmd == "ping" {
				continue
			}
			if d := plane[cmd].calls - yaml[cmd].calls; d > slack || d < -slack {
				t.Errorf("%s: %d calls for the plane's %d decisions in %v, %d for yaml's in %v; want at most %d apart", cmd,
					plane[cmd].calls, o.sequential, turns[1].elapsed, yaml[cmd].calls, turns[0].elapsed, slack)
			}
		}
	}
	if e.redisPerKey <= 0 {
		t.Errorf("Redis memory per key: %.0f bytes; want it measured", e.redisPerKey)
	}
}
