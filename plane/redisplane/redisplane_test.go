package redisplane_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	store := redisplane.New(func() (rueidis.Client, error) { return rc, nil }, redisplane.Options{Prefix: prefix, Block: 200 * time.Millisecond})
	var svc *service.Service
	p, err := plane.Open(context.Background(), store, plane.Options{Logger: testkit.Quiet(), KnownPlan: func(n string) bool { return svc.KnownPlan(n) }})
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
