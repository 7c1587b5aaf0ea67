package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
)

// TestClusterRefundsEarlierSlotsWhenALaterOneTimesOut: a check across two
// slots on different masters, the second master paused (CLIENT PAUSE, as a
// master stalled by a slow command or a fork would be). The first slot is
// charged, the caller's deadline passes while the second slot's call
// waits, and the first slot's charge is taken back on a context of its own
// (Options.RefundTimeout), not on the caller's expired one: nothing stays
// charged.
func TestClusterRefundsEarlierSlotsWhenALaterOneTimesOut(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	// ContextTimeoutEnabled: go-redis gives up at the caller's deadline
	// instead of its own read timeout.
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	st := newStore(t, goredisclient.New(c), redisstore.Options{Prefix: newPrefix(), Cluster: true})
	l := tokenlimit.FixedWindowLimit(10, time.Hour)
	early, late, earlyNode, lateNode := keysOnTwoMasters(t, cluster, st, l.Algorithm)
	items := []tokenlimit.Item{{Key: early, Limit: l, Cost: 4}, {Key: late, Limit: l, Cost: 4}}
	results := make([]tokenlimit.Result, len(items))
	peek := func(key string) int64 {
		t.Helper()
		got := make([]tokenlimit.Result, 1)
		if _, err := st.Check(context.Background(), time.Now(), []tokenlimit.Item{{Key: key, Limit: l}}, got); err != nil {
			t.Fatal(err)
		}
		return got[0].Remaining
	}
	// Connections to both masters are open and the scripts loaded before
	// the pause, so that the deadline meets the paused call, not a dial, and
	// every script runs at its first call: a check across both slots, taken
	// back.
	if _, err := st.Check(context.Background(), time.Now(), items, results); err != nil || !results[0].Allowed || !results[1].Allowed {
		t.Fatalf("check across the slots: %v, %+v", err, results)
	}
	back := []tokenlimit.Adjustment{{Key: early, Limit: l, Delta: -4, ChargedAt: time.Now()}, {Key: late, Limit: l, Delta: -4, ChargedAt: time.Now()}}
	if err := st.Adjust(context.Background(), time.Now(), back); err != nil {
		t.Fatal(err)
	}
	if peek(early) != 10 || peek(late) != 10 {
		t.Fatal("budgets not whole again")
	}

	// Paused for longer than the caller's deadline; the pause ends by
	// itself (a paused server queues CLIENT UNPAUSE too).
	if _, err := cluster.Node(lateNode).Do("CLIENT", "PAUSE", "2500", "ALL"); err != nil {
		t.Fatal(err)
	}
	scriptsBefore := scriptCalls(t, cluster.Node(earlyNode))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	_, err := st.Check(ctx, time.Now(), items, results)
	// The client reports the deadline as its own (context deadline exceeded)
	// or as the socket's (i/o timeout, whose deadline is the context's, and
	// which may come before the context's own timer has fired): either way
	// it has passed.
	if err == nil || time.Now().Before(deadline) || strings.Contains(err.Error(), "refunding") {
		t.Fatalf("check with the second slot's master paused: %v (at %v, the caller's deadline %v); want it failed at the caller's deadline, and no failed refund", err, time.Now(), deadline)
	}
	// The first slot's master ran two scripts: the charge and its refund.
	if n := scriptCalls(t, cluster.Node(earlyNode)) - scriptsBefore; n != 2 {
		t.Errorf("the first slot's master ran %d scripts during the check, want 2 (the charge and the refund)", n)
	}
	if got := peek(early); got != 10 {
		t.Errorf("first slot: %d of 10 left after the check timed out, want 10 (refunded)", got)
	}
	if got := peek(late); got != 10 {
		t.Errorf("second slot: %d of 10 left, want 10 (never charged)", got)
	}
}

// keysOnTwoMasters returns two budget keys whose Redis keys live on
// different masters, and those masters.
func keysOnTwoMasters(t *testing.T, cluster *redistest.Cluster, st *redisstore.Store, alg tokenlimit.Algorithm) (string, string, int, int) {
	t.Helper()
	nodeOf := func(key string) int {
		n, err := cluster.NodeOf(st.Keys(key, alg)[0])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	early := "early"
	for i := range 100 {
		late := fmt.Sprintf("late%d", i)
		if a, b := nodeOf(early), nodeOf(late); a != b {
			return early, late, a, b
		}
	}
	t.Fatal("no key of 100 on another master than the first")
	return "", "", 0, 0
}

// scriptCalls returns how many script calls (EVALSHA, EVAL, FCALL and their
// read-only forms) srv has run, from INFO commandstats.
func scriptCalls(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"evalsha", "eval", "fcall", "evalsha_ro", "eval_ro", "fcall_ro"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
				n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				if err != nil {
					t.Fatalf("INFO commandstats line %q: %v", line, err)
				}
				total += n
			}
		}
	}
	return total
}
