package redisplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/plane/redisplane"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/service"
)

var prefixes atomic.Int64

// replica is one service with its plane on a Redis of its own client.
type replica struct {
	svc   *service.Service
	plane *plane.Plane
}

func newReplica(t *testing.T, srv *redistest.Server, prefix string) replica {
	t.Helper()
	return newLoggingReplica(t, srv, prefix, testkit.Quiet())
}

// newLoggingReplica is newReplica whose plane logs to log.
func newLoggingReplica(t *testing.T, srv *redistest.Server, prefix string, log *slog.Logger) replica {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	store := redisplane.New(func() (rueidis.Client, error) { return rc, nil }, redisplane.Options{Prefix: prefix, Block: 200 * time.Millisecond})
	var svc *service.Service
	p, err := plane.Open(context.Background(), store, plane.Options{Logger: log, KnownPlan: func(n string) bool { return svc.KnownPlan(n) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// The replicas' budgets share one prefix, as replicas of one
	// deployment do.
	budgets, err := redisstore.New(rueidisclient.New(rc), redisstore.Options{Prefix: prefix + ":"})
	if err != nil {
		t.Fatal(err)
	}
	te := testkit.NewService(t, testkit.Setup{Store: testkit.Redis, Redis: srv, Client: testkit.Rueidis, Start: time.Now(),
		Config: testkit.ParseConfig(t, "limits:\n  - {name: rpm, key: [api_key], algorithm: fixed_window, limit: 100/min}\n"),
		Clock:  time.Now, WrapStore: func(tokenlimit.Store) tokenlimit.Store { return budgets }, Edit: func(o *service.Options) { o.Plane = p }})
	svc = te.Service
	return replica{svc: te.Service, plane: p}
}

func newPrefix() string { return fmt.Sprintf("tplane%d", prefixes.Add(1)) }

func (r replica) check(secret string) error {
	_, err := r.svc.Check(context.Background(), service.Request{Descriptors: map[string]string{"api_key": secret}})
	return err
}

// TestTwoReplicas: a key created on A is used on B, and once revoked on B
// refused on A, each within a second.
func TestTwoReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := newPrefix()
	a, b := newReplica(t, srv, prefix), newReplica(t, srv, prefix)
	ctx := context.Background()
	if _, err := a.plane.CreateTeam(ctx, plane.Spec{Name: "acme", Limits: []byte(`[{"name": "rpm", "algorithm": "fixed_window", "limit": "2/min"}]`)}); err != nil {
		t.Fatal(err)
	}
	k, secret, err := a.plane.CreateKey(ctx, plane.Spec{Name: "k", Team: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Second, "the key created on A in force on B", func() bool { _, _, err := b.plane.Authenticate(secret, time.Now()); return err == nil })
	// One team budget across replicas: A's and B's calls share it.
	for _, r := range []replica{b, a} {
		if err := r.check(secret); err != nil {
			t.Fatal(err)
		}
	}
	d, err := b.svc.Check(ctx, service.Request{Descriptors: map[string]string{"api_key": secret}})
	if err != nil || d.Allowed {
		t.Fatalf("the third call of a 2/min team budget on two replicas: %+v, %v; want denied", d, err)
	}
	if err := b.plane.DeleteKey(ctx, k.ID, plane.AnyVersion); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Second, "the key revoked on B refused on A", func() bool {
		return errors.Is(a.check(secret), service.ErrUnauthorized)
	})
}

// TestIfMatchAcrossReplicas: of two edits of one version made on two
// replicas, one loses with ErrConflict.
func TestIfMatchAcrossReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := newPrefix()
	a, b := newReplica(t, srv, prefix), newReplica(t, srv, prefix)
	ctx := context.Background()
	team, err := a.plane.CreateTeam(ctx, plane.Spec{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.plane.CreateTeam(ctx, plane.Spec{Name: "acme"}); !errors.Is(err, plane.ErrConflict) {
		t.Fatalf("a second create of acme on B: %v, want ErrConflict", err)
	}
	testkit.Eventually(t, time.Second, "acme on B", func() bool { _, ok := b.plane.Team("acme"); return ok })
	if _, err := a.plane.UpdateTeam(ctx, "acme", plane.Spec{Disabled: true}, team.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := b.plane.UpdateTeam(ctx, "acme", plane.Spec{}, team.Version); !errors.Is(err, plane.ErrConflict) {
		t.Fatalf("the second edit of one version: %v, want ErrConflict", err)
	}
}

// TestFollowsAfterTrimAndFlush: a replica whose place in the stream was
// trimmed, or whose Redis lost everything, reloads every record.
func TestFollowsAfterTrimAndFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := newPrefix()
	a := newReplica(t, srv, prefix)
	ctx := context.Background()
	if _, err := a.plane.CreateTeam(ctx, plane.Spec{Name: "one"}); err != nil {
		t.Fatal(err)
	}
	// B's store writes behind A's plane's back, then trims the stream.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	raw := redisplane.New(func() (rueidis.Client, error) { return rc, nil }, redisplane.Options{Prefix: prefix})
	if _, err := srv.Do("XTRIM", "{"+prefix+"}:log", "MAXLEN", "0"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, plane.KindTeam, "two", 0, []byte(`{"format":1,"name":"two","updated_at":"2026-01-01T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("XTRIM", "{"+prefix+"}:log", "MAXLEN", "0"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, plane.KindTeam, "three", 0, []byte(`{"format":1,"name":"three","updated_at":"2026-01-01T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 2*time.Second, "team two, whose write was trimmed, on A", func() bool { _, ok := a.plane.Team("two"); return ok })
	for _, k := range []string{"records", "versions", "seq", "log"} {
		if _, err := srv.Do("DEL", "{"+prefix+"}:"+k); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 2*time.Second, "A forgets what Redis lost", func() bool { _, ok := a.plane.Team("one"); return !ok })
}

// TestUnreadableRecordsAreReportedOnceAndSkipped: records a replica cannot
// read (not JSON, a later format, a kind it does not know, a key without
// a digest), whether in Redis when it starts or written while it follows
// the stream, are each logged once per version by each replica, reloads
// of every record included, and left out of force; everything else is in
// force, the replicas keep following, and a readable version of a record
// brings it back.
func TestUnreadableRecordsAreReportedOnceAndSkipped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := newPrefix()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	// raw writes records as another program (or a later version) would.
	raw := redisplane.New(func() (rueidis.Client, error) { return rc, nil }, redisplane.Options{Prefix: prefix})
	ctx := context.Background()
	put := func(kind plane.Kind, id, data string) {
		t.Helper()
		if _, err := raw.Put(ctx, kind, id, plane.AnyVersion, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	const team = `{"format":1,"name":"%s","updated_at":"2026-01-01T00:00:00Z"}`
	put(plane.KindTeam, "good", fmt.Sprintf(team, "good"))
	put(plane.KindKey, "key_notjson", `{"format":1,"name":`)
	put(plane.KindTeam, "later", `{"format":2,"name":"later","updated_at":"2026-01-01T00:00:00Z","quota_units":"gpu-hours"}`)
	put(plane.Kind("widget"), "w1", `{"format":1}`)
	put(plane.KindKey, "key_nodigest", `{"format":1,"name":"k","updated_at":"2026-01-01T00:00:00Z"}`)

	var logs [2]testkit.Buffer
	a := newLoggingReplica(t, srv, prefix, slog.New(slog.NewJSONHandler(&logs[0], nil)))
	b := newLoggingReplica(t, srv, prefix, slog.New(slog.NewJSONHandler(&logs[1], nil)))
	for _, r := range []replica{a, b} {
		if _, ok := r.plane.Team("good"); !ok {
			t.Fatal("a readable team beside unreadable records is not in force")
		}
		if _, ok := r.plane.Team("later"); ok {
			t.Error("a team of a later format is in force")
		}
		if _, ok := r.plane.Key("key_notjson"); ok {
			t.Error("a key that is not JSON is in force")
		}
		if _, ok := r.plane.Key("key_nodigest"); ok {
			t.Error("a key without a digest is in force")
		}
	}

	// Written while the replicas follow the stream.
	put(plane.KindKey, "key_torn", `{"format":1,"name":"torn","digest":"00`)
	put(plane.KindTeam, "good", `{"format":1,"name":`) // good becomes unreadable
	_, secret, err := a.plane.CreateKey(ctx, plane.Spec{Name: "fine"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 2*time.Second, "a key created after unreadable writes in force on B", func() bool {
		_, _, err := b.plane.Authenticate(secret, time.Now())
		return err == nil
	})
	// A applied its own write at once, and may read the stream's earlier
	// one after it.
	testkit.Eventually(t, 2*time.Second, "the team good, whose last version is unreadable, out of force on both replicas", func() bool {
		_, okA := a.plane.Team("good")
		_, okB := b.plane.Team("good")
		return !okA && !okB
	})
	// A readable version brings it back.
	put(plane.KindTeam, "good", fmt.Sprintf(team, "good"))
	testkit.Eventually(t, 2*time.Second, "the team good, readable again, on both replicas", func() bool {
		_, okA := a.plane.Team("good")
		_, okB := b.plane.Team("good")
		return okA && okB
	})
	// A gap in the stream (a write numbered past the next one, as when
	// writes were trimmed from it) makes the replicas reload every record:
	// the unreadable ones are not reported again.
	if _, err := srv.Do("INCR", "{"+prefix+"}:seq"); err != nil {
		t.Fatal(err)
	}
	put(plane.KindTeam, "after-gap", fmt.Sprintf(team, "after-gap"))
	testkit.Eventually(t, 2*time.Second, "both replicas reloaded past the gap", func() bool {
		_, okA := a.plane.Team("after-gap")
		_, okB := b.plane.Team("after-gap")
		return okA && okB
	})
	for i, name := range []string{"A", "B"} {
		reports := map[string]int{}
		for _, line := range strings.Split(logs[i].String(), "\n") {
			var rec struct{ Msg, Kind, ID string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "plane: skipping a record that cannot be read" {
				reports[rec.Kind+"/"+rec.ID]++
			}
		}
		want := map[string]int{"key/key_notjson": 1, "team/later": 1, "widget/w1": 1, "key/key_nodigest": 1, "key/key_torn": 1, "team/good": 1}
		if !maps.Equal(reports, want) {
			t.Errorf("replica %s reported %v, want each unreadable version once: %v", name, reports, want)
		}
	}
}

// BenchmarkPropagation is the time from a write answered on one replica to
// the record in force on another (a key created on A authenticated on B).
func BenchmarkPropagation(b *testing.B) {
	srv := redistest.Start(b)
	prefix := newPrefix()
	open := func() *plane.Plane {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(rc.Close)
		p, err := plane.Open(context.Background(), redisplane.New(func() (rueidis.Client, error) { return rc, nil }, redisplane.Options{Prefix: prefix}), plane.Options{Logger: testkit.Quiet()})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); p.Run(ctx) }()
		b.Cleanup(func() { cancel(); <-done })
		return p
	}
	a, other := open(), open()
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		_, secret, err := a.CreateKey(ctx, plane.Spec{Name: "k"})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, _, err := other.Authenticate(secret, time.Now()); err == nil {
				break
			}
			runtime.Gosched() // spinning on the cache: the measure is the latency
		}
	}
}

// TestTwoReplicasOnCluster: on Redis Cluster the plane's keys share one
// slot (its writes are one script on one node), and replicas agree: a key
// created on A is in force on B, and once revoked on B refused on A, each
// within a second.
func TestTwoReplicasOnCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	prefix := newPrefix()
	open := func() *plane.Plane {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cluster.Addrs(), DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		p, err := plane.Open(context.Background(), redisplane.New(func() (rueidis.Client, error) { return rc, nil },
			redisplane.Options{Prefix: prefix, Block: 200 * time.Millisecond}), plane.Options{Logger: testkit.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); p.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return p
	}
	a, b := open(), open()
	ctx := context.Background()
	if _, err := a.CreateTeam(ctx, plane.Spec{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	k, secret, err := a.CreateKey(ctx, plane.Spec{Name: "k", Team: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Second, "the key created on A in force on B", func() bool {
		_, team, err := b.Authenticate(secret, time.Now())
		return err == nil && team != nil && team.ID == "acme"
	})
	if err := b.DeleteKey(ctx, k.ID, plane.AnyVersion); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Second, "the key revoked on B refused on A", func() bool {
		_, _, err := a.Authenticate(secret, time.Now())
		return errors.Is(err, plane.ErrUnknownKey)
	})
	slots := map[string]bool{}
	for _, name := range []string{"records", "versions", "seq", "log"} {
		slot, err := cluster.Node(0).Do("CLUSTER", "KEYSLOT", "{"+prefix+"}:"+name)
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	if len(slots) != 1 {
		t.Errorf("the plane's keys are in slots %v, want one", slots)
	}
}
