package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit/bench/internal/redisserver"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/plane/redisplane"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/service"
)

// A limit that admits every call: the allow-and-store path in a steady
// state, as in the other benchmarks.
const huge = "1000000000/min"

// env is what the load runs on: one service whose budgets are on Redis,
// with a plane replica that loaded every key from Redis, and both kinds of
// keys.
type env struct {
	srv     *redisserver.Server
	clients []rueidis.Client
	admin   rueidis.Client // INFO and MEMORY USAGE
	svc     *service.Service
	stop    context.CancelFunc
	// yamlKeys are listed under api_keys; planeKeys are plane secrets.
	yamlKeys, planeKeys []string
	// what setUp measured
	created     time.Duration
	heapPerKey  float64 // bytes of the service's heap per plane key
	redisPerKey float64 // bytes of Redis' used_memory per plane key
	redisParts  map[string]int64
	yamlParse   time.Duration
}

func (e *env) close() {
	e.stop()
	for _, c := range e.clients {
		c.Close()
	}
	e.srv.Stop()
}

// yamlConfig lists n api keys, key i in team i%teams, under three limits:
// the key's, the team's and the plan's.
func yamlConfig(keys []string, teams int) []byte {
	var b strings.Builder
	b.WriteString("plans:\n  pro: {daily: 1000000000}\nlimits:\n")
	b.WriteString("  - {name: key-rpm, key: [api_key], algorithm: fixed_window, limit: " + huge + "}\n")
	b.WriteString("  - {name: team-rpm, key: [tenant], algorithm: fixed_window, limit: " + huge + "}\n")
	b.WriteString("api_keys:\n")
	for i, k := range keys {
		fmt.Fprintf(&b, "  %s: {tenant: team%d, plan: pro}\n", k, i%teams)
	}
	return []byte(b.String())
}

func setUp(ctx context.Context, o options, log io.Writer) (_ *env, err error) {
	srv, err := redisserver.Start(o.redisServer)
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	e := &env{srv: srv, stop: stop}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	newClient := func() (rueidis.Client, error) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
		if err == nil {
			e.clients = append(e.clients, c)
		}
		return c, err
	}
	// As long as a plane secret ("tl-" and 64 hex digits), as api keys
	// are: validating, hashing and looking up a key take time with its
	// length.
	e.yamlKeys = make([]string, o.yamlKeys)
	for i := range e.yamlKeys {
		e.yamlKeys[i] = fmt.Sprintf("sk-%064x", i)
	}
	start := time.Now()
	cfg, err := config.Parse(yamlConfig(e.yamlKeys, o.teams), "planeload.yaml")
	if err != nil {
		return nil, err
	}
	e.yamlParse = time.Since(start)

	storeClient, err1 := newClient()
	writerClient, err2 := newClient()
	replicaClient, err3 := newClient()
	var err4 error
	e.admin, err4 = newClient()
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, err
	}
	budgets, err := redisstore.New(rueidisclient.New(storeClient), redisstore.Options{})
	if err != nil {
		return nil, err
	}
	var svc *service.Service
	known := func(p string) bool { return svc != nil && svc.KnownPlan(p) || p == "pro" }
	quiet := slog.New(slog.DiscardHandler)
	writer, err := plane.Open(ctx, redisplane.New(func() (rueidis.Client, error) { return writerClient, nil }, redisplane.Options{}), plane.Options{KnownPlan: known, Logger: quiet})
	if err != nil {
		return nil, err
	}
	usedBefore, err := usedMemory(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "creating %d teams and %d plane keys through plane.CreateKey\n", o.teams, o.keys)
	start = time.Now()
	if e.planeKeys, err = createKeys(ctx, writer, o); err != nil {
		return nil, err
	}
	e.created = time.Since(start)
	usedAfter, err := usedMemory(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	e.redisPerKey = float64(usedAfter-usedBefore) / float64(o.keys)
	if e.redisParts, err = planeMemory(ctx, e.admin); err != nil {
		return nil, err
	}

	// The service's plane is a replica that loads every key from Redis:
	// its heap growth is the memory the plane's keys take in a service.
	heapBefore := heapAlloc()
	replica, err := plane.Open(ctx, redisplane.New(func() (rueidis.Client, error) { return replicaClient, nil }, redisplane.Options{}), plane.Options{KnownPlan: known, Logger: quiet})
	if err != nil {
		return nil, err
	}
	go replica.Run(runCtx)
	if err := awaitKeys(ctx, replica, o.keys); err != nil {
		return nil, err
	}
	e.heapPerKey = float64(heapAlloc()-heapBefore) / float64(o.keys)

	svc, err = service.New(cfg, service.Options{Store: budgets, Plane: replica, Logger: quiet, StoreTimeout: 5 * time.Second, FailOpenKeys: o.failOpen})
	if err != nil {
		return nil, err
	}
	e.svc = svc
	for _, k := range []string{e.yamlKeys[0], e.planeKeys[0]} {
		d, err := svc.Check(ctx, service.Request{Descriptors: map[string]string{"api_key": k}})
		if err != nil || !d.Allowed || len(d.Limits) != 3 {
			return nil, fmt.Errorf("a first check: %+v, %v: want allowed under three limits", d, err)
		}
	}
	return e, nil
}

// createKeys creates o.teams teams (plan pro, the team's limit) and o.keys
// keys (key i in team i%teams, the key's limit) with 32 writers, and
// returns the keys' secrets.
func createKeys(ctx context.Context, p *plane.Plane, o options) ([]string, error) {
	for t := range o.teams {
		s := plane.Spec{Name: "team" + strconv.Itoa(t), Plan: "pro", Limits: []byte(`[{"name": "team-rpm", "algorithm": "fixed_window", "limit": "` + huge + `"}]`)}
		if _, err := p.CreateTeam(ctx, s); err != nil {
			return nil, fmt.Errorf("creating team %d: %w", t, err)
		}
	}
	secrets := make([]string, o.keys)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for w := range errs {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= o.keys || ctx.Err() != nil {
					errs[w] = ctx.Err()
					return
				}
				s := plane.Spec{Name: "key" + strconv.Itoa(i), Team: "team" + strconv.Itoa(i%o.teams), Labels: map[string]string{"env": "prod"},
					Limits: []byte(`[{"name": "key-rpm", "algorithm": "fixed_window", "limit": "` + huge + `"}]`)}
				_, secret, err := p.CreateKey(ctx, s)
				if err != nil {
					errs[w] = fmt.Errorf("creating key %d: %w", i, err)
					return
				}
				secrets[i] = secret
			}
		})
	}
	wg.Wait()
	return secrets, errors.Join(errs...)
}

// awaitKeys waits until replica holds n keys: Open loads them, or Run
// does once Redis answers if that load failed (a busy machine can make it
// time out).
func awaitKeys(ctx context.Context, replica *plane.Plane, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		keys, _ := replica.ListKeys(plane.Filter{}, "", n+1)
		if len(keys) == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the replica loaded %d keys, want %d: %w", len(keys), n, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// heapAlloc returns the live heap after a full GC.
func heapAlloc() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func usedMemory(ctx context.Context, c rueidis.Client) (int64, error) {
	info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	return infoInt(info, "used_memory")
}

func infoInt(info, field string) (int64, error) {
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO has no %s", field)
}

// planeMemory returns MEMORY USAGE (every element counted) of the plane's
// Redis keys.
func planeMemory(ctx context.Context, c rueidis.Client) (map[string]int64, error) {
	out := map[string]int64{}
	for _, k := range []string{"records", "versions", "log"} {
		n, err := c.Do(ctx, c.B().Arbitrary("MEMORY", "USAGE").Keys("{tl:plane}:"+k).Args("SAMPLES", "0").Build()).AsInt64()
		if err != nil {
			return nil, fmt.Errorf("MEMORY USAGE %s: %w", k, err)
		}
		out[k] = n
	}
	return out, nil
}
