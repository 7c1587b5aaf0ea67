package main

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestPlaneLookupAddsNoCommand: decisions made with plane keys send Redis
// exactly the commands that the same three limits from YAML send, one
// decision at a time (the store batches nothing then); at most a few
// calls apart, those of the replica following the stream. A lookup that
// went to Redis would add one command per decision: 300 here.
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
	for _, cmds := range []map[string]cmdStat{yaml, plane} {
		for cmd := range cmds {
			if d := plane[cmd].calls - yaml[cmd].calls; d > 3 || d < -3 {
				t.Errorf("%s: %d calls for the plane's %d decisions, %d for yaml's", cmd, plane[cmd].calls, o.sequential, yaml[cmd].calls)
			}
		}
	}
	if e.redisPerKey <= 0 {
		t.Errorf("Redis memory per key: %.0f bytes; want it measured", e.redisPerKey)
	}
}
