package envoycompat_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/envoycompat"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// base is 2026-01-01 00:00:00 UTC: a whole day and a whole week since the
// Unix epoch, so the windows of SECOND to WEEK start there.
var base = time.Unix(1767225600, 0)

// storeNames are the stores every behaviour runs on.
var storeNames = []string{testkit.Memory, testkit.Redis}

// stores starts what the named stores need for t and its subtests: a
// redis-server, stopped when t ends.
type stores struct{ redisAddr string }

func startStores(t *testing.T) stores {
	return stores{redisAddr: redistest.Start(t).Addr()}
}

// newStore returns a fresh store of the named kind; the Redis store
// decides at the caller's (fake) time.
func (s stores) newStore(t *testing.T, name string) tokenlimit.Store {
	t.Helper()
	if name == testkit.Memory {
		return testkit.MemStore(t)
	}
	return testkit.RedisStore(t, s.redisAddr, testkit.GoRedis)
}

// parse loads one or more files given as name => YAML.
func parse(t *testing.T, opts envoycompat.LoadOptions, files ...string) *envoycompat.Config {
	t.Helper()
	var fs []envoycompat.File
	for i, f := range files {
		fs = append(fs, envoycompat.File{Name: fmt.Sprintf("f%d.yaml", i), Data: []byte(f)})
	}
	cfg, err := envoycompat.Parse(fs, opts)
	if err != nil {
		t.Fatalf("config:\n%v", err)
	}
	return cfg
}

// desc builds a descriptor from "k=v" entries ("k=" for an empty value).
func desc(entries ...string) envoycompat.Descriptor {
	var d envoycompat.Descriptor
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, envoycompat.Entry{Key: k, Value: v})
	}
	return d
}

func hits(d envoycompat.Descriptor, n uint64) envoycompat.Descriptor {
	d.HitsAddend = &n
	return d
}

// st describes an expected status: code, then for a limited descriptor
// "rpu/UNIT[/name]", remaining and seconds until reset.
type st struct {
	code      envoycompat.Code
	limit     string // "" for no current_limit
	remaining uint32
	reset     int64
}

func (s st) String() string {
	return fmt.Sprintf("{%v %q remaining=%d reset=%ds}", s.code, s.limit, s.remaining, s.reset)
}

func got(s envoycompat.Status) st {
	out := st{code: s.Code, remaining: s.LimitRemaining}
	if l := s.CurrentLimit; l != nil {
		out.limit = fmt.Sprintf("%d/%v", l.RequestsPerUnit, l.Unit)
		if l.Name != "" {
			out.limit += "/" + l.Name
		}
		out.reset = int64(s.DurationUntilReset / time.Second)
	}
	return out
}

const (
	ok   = envoycompat.OK
	over = envoycompat.OverLimit
)

// call is one request at base+at and its expected answer.
type call struct {
	at      time.Duration
	req     envoycompat.Request
	overall envoycompat.Code
	want    []st
}

func rq(domain string, ds ...envoycompat.Descriptor) envoycompat.Request {
	return envoycompat.Request{Domain: domain, Descriptors: ds}
}

// repeat is n copies of c.
func repeat(n int, c func(i int) call) []call {
	out := make([]call, n)
	for i := range out {
		out[i] = c(i)
	}
	return out
}

type engineCase struct {
	name  string
	files []string
	opts  envoycompat.Options
	merge bool
	calls []call
}

var engineCases = []engineCase{
	{
		name: "the most specific descriptor wins: a child at 10/s overrides its parent at 5/s",
		files: []string{`
domain: d
descriptors:
  - key: key1
    value: value1
    rate_limit: {unit: second, requests_per_unit: 5}
    descriptors:
      - key: subkey1
        value: subvalue1
        rate_limit: {unit: second, requests_per_unit: 10}
`},
		calls: append(repeat(7, func(i int) call {
			return call{req: rq("d", desc("key1=value1", "subkey1=subvalue1")), overall: ok,
				want: []st{{ok, "10/SECOND", uint32(9 - i), 1}}}
		}), repeat(6, func(i int) call {
			c := call{req: rq("d", desc("key1=value1")), overall: ok, want: []st{{ok, "5/SECOND", uint32(4 - i), 1}}}
			if i == 5 {
				c.overall, c.want = over, []st{{over, "5/SECOND", 0, 1}}
			}
			return c
		})...),
	},
	{
		name: "a node without rate_limit is unlimited, and so is its subtree without limits",
		files: []string{`
domain: d
descriptors:
  - key: key1
    descriptors:
      - key: key2
        value: v
        rate_limit: {unit: minute, requests_per_unit: 1}
`},
		calls: repeat(21, func(int) call {
			return call{req: rq("d", desc("key1=x")), overall: ok, want: []st{{ok, "", 0, 0}}}
		}),
	},
	{
		name: "not all-or-nothing: a descriptor under its limit is counted while another is over",
		files: []string{`
domain: d
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 5}}
`},
		calls: []call{
			{at: 10 * time.Second, req: rq("d", desc("a=1"), desc("b=1")), overall: ok, want: []st{{ok, "1/MINUTE", 0, 50}, {ok, "5/MINUTE", 4, 50}}},
			{at: 10 * time.Second, req: rq("d", desc("a=1"), desc("b=1")), overall: over, want: []st{{over, "1/MINUTE", 0, 50}, {ok, "5/MINUTE", 3, 50}}},
			{at: 10 * time.Second, req: rq("d", desc("b=1")), overall: ok, want: []st{{ok, "5/MINUTE", 2, 50}}},
		},
	},
	{
		name: "denied hits count; a descriptor hits_addend of 0 peeks; a request hits_addend of 0 counts 1",
		files: []string{`
domain: d
descriptors:
  - {key: k, rate_limit: {unit: minute, requests_per_unit: 3}}
`},
		calls: []call{
			{at: 59 * time.Second, req: rq("d", hits(desc("k=x"), 0)), overall: ok, want: []st{{ok, "3/MINUTE", 3, 1}}},
			{at: 59 * time.Second, req: envoycompat.Request{Domain: "d", Descriptors: []envoycompat.Descriptor{desc("k=x")}, HitsAddend: 0}, overall: ok, want: []st{{ok, "3/MINUTE", 2, 1}}},
			{at: 59 * time.Second, req: rq("d", hits(desc("k=x"), 2)), overall: ok, want: []st{{ok, "3/MINUTE", 0, 1}}},
			{at: 59 * time.Second, req: rq("d", hits(desc("k=x"), 0)), overall: ok, want: []st{{ok, "3/MINUTE", 0, 1}}},
			{at: 59 * time.Second, req: envoycompat.Request{Domain: "d", Descriptors: []envoycompat.Descriptor{desc("k=x")}, HitsAddend: 2}, overall: over, want: []st{{over, "3/MINUTE", 0, 1}}},
			// The count is 5 now, above 3: a peek is over the limit too.
			{at: 59 * time.Second, req: rq("d", hits(desc("k=x"), 0)), overall: over, want: []st{{over, "3/MINUTE", 0, 1}}},
			// The next minute starts afresh.
			{at: 60 * time.Second, req: rq("d", desc("k=x")), overall: ok, want: []st{{ok, "3/MINUTE", 2, 60}}},
		},
	},
	{
		name: "only the descriptor at exactly the request's depth applies",
		files: []string{`
domain: d
descriptors:
  - key: k1
    value: v1
    rate_limit: {unit: hour, requests_per_unit: 2}
    descriptors:
      - key: k2
        rate_limit: {unit: hour, requests_per_unit: 7}
`},
		calls: []call{
			{req: rq("d", desc("k1=v1", "k2=x", "k3=y")), overall: ok, want: []st{{ok, "", 0, 0}}},
			{req: rq("d", desc("k1=v1", "k2=x")), overall: ok, want: []st{{ok, "7/HOUR", 6, 3600}}},
			{req: rq("d", desc("k1=v1", "k2=y")), overall: ok, want: []st{{ok, "7/HOUR", 6, 3600}}},
			{req: rq("d", desc("k1=v1")), overall: ok, want: []st{{ok, "2/HOUR", 1, 3600}}},
			{req: rq("d", desc("k1=v2")), overall: ok, want: []st{{ok, "", 0, 0}}},
			{req: rq("other", desc("k1=v1")), overall: ok, want: []st{{ok, "", 0, 0}}},
		},
	},
	{
		name: "an exact value beats a wildcard, which beats a key-only entry (one budget per value)",
		files: []string{`
domain: d
descriptors:
  - {key: path, rate_limit: {unit: day, requests_per_unit: 30}}
  - {key: path, value: "/fo*", rate_limit: {unit: day, requests_per_unit: 20}}
  - {key: path, value: /foo, rate_limit: {unit: day, requests_per_unit: 10}}
  - {key: path, value: "/a*c", rate_limit: {unit: day, requests_per_unit: 40}}
`},
		calls: []call{
			{req: rq("d", desc("path=/foo")), overall: ok, want: []st{{ok, "10/DAY", 9, 86400}}},
			{req: rq("d", desc("path=/fox")), overall: ok, want: []st{{ok, "20/DAY", 19, 86400}}},
			{req: rq("d", desc("path=/fo")), overall: ok, want: []st{{ok, "20/DAY", 19, 86400}}},
			{req: rq("d", desc("path=/fox")), overall: ok, want: []st{{ok, "20/DAY", 18, 86400}}},
			{req: rq("d", desc("path=/bar")), overall: ok, want: []st{{ok, "30/DAY", 29, 86400}}},
			{req: rq("d", desc("path=/baz")), overall: ok, want: []st{{ok, "30/DAY", 29, 86400}}},
			// Only a trailing '*' is a wildcard: "/a*c" is a value like any other.
			{req: rq("d", desc("path=/abbc")), overall: ok, want: []st{{ok, "30/DAY", 29, 86400}}},
			{req: rq("d", desc("path=/a*c")), overall: ok, want: []st{{ok, "40/DAY", 39, 86400}}},
		},
	},
	{
		name: "share_threshold: every value a wildcard matches shares one budget",
		files: []string{`
domain: d
descriptors:
  - {key: f, value: "files/*", share_threshold: true, rate_limit: {unit: hour, requests_per_unit: 3}}
  - {key: g, value: "files/*", rate_limit: {unit: hour, requests_per_unit: 3}}
`},
		calls: []call{
			{req: rq("d", desc("f=files/a")), overall: ok, want: []st{{ok, "3/HOUR", 2, 3600}}},
			{req: rq("d", desc("f=files/b")), overall: ok, want: []st{{ok, "3/HOUR", 1, 3600}}},
			{req: rq("d", desc("g=files/a")), overall: ok, want: []st{{ok, "3/HOUR", 2, 3600}}},
			{req: rq("d", desc("g=files/b")), overall: ok, want: []st{{ok, "3/HOUR", 2, 3600}}},
		},
	},
	{
		name: "unlimited, replaces, shadow_mode and names",
		files: []string{`
domain: d
descriptors:
  - key: vip
    rate_limit: {unlimited: true}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, name: per-user}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5, name: per-tenant, replaces: [{name: per-user}]}
  - key: probe
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`},
		calls: []call{
			{req: rq("d", desc("vip=a")), overall: ok, want: []st{{ok, "", math.MaxUint32, 0}}},
			{req: rq("d", desc("user=u"), desc("tenant=t")), overall: ok, want: []st{{ok, "", 0, 0}, {ok, "5/MINUTE/per-tenant", 4, 60}}},
			{req: rq("d", desc("user=u")), overall: ok, want: []st{{ok, "1/MINUTE/per-user", 0, 60}}},
			{req: rq("d", desc("user=u")), overall: over, want: []st{{over, "1/MINUTE/per-user", 0, 60}}},
			{req: rq("d", desc("probe=p")), overall: ok, want: []st{{ok, "1/MINUTE", 0, 60}}},
			{req: rq("d", desc("probe=p")), overall: ok, want: []st{{ok, "1/MINUTE", 0, 60}}},
		},
	},
	{
		name: "windows of every unit aligned to the Unix epoch",
		files: []string{`
domain: d
descriptors:
  - {key: s, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: m, rate_limit: {unit: MINUTE, requests_per_unit: 1}}
  - {key: h, rate_limit: {unit: Hour, requests_per_unit: 1}}
  - {key: d, rate_limit: {unit: day, requests_per_unit: 1}}
  - {key: w, rate_limit: {unit: week, requests_per_unit: 1}}
  - {key: mo, rate_limit: {unit: month, requests_per_unit: 1}}
  - {key: y, rate_limit: {unit: year, requests_per_unit: 1}}
`},
		calls: []call{
			{at: 10 * time.Second, req: rq("d", desc("s=1"), desc("m=1"), desc("h=1"), desc("d=1"), desc("w=1"), desc("mo=1"), desc("y=1")), overall: ok,
				want: []st{{ok, "1/SECOND", 0, 1}, {ok, "1/MINUTE", 0, 50}, {ok, "1/HOUR", 0, 3590}, {ok, "1/DAY", 0, 86390}, {ok, "1/WEEK", 0, 7*86400 - 10}, {ok, "1/MONTH", 0, 518390}, {ok, "1/YEAR", 0, 30326390}}},
			{at: 11 * time.Second, req: rq("d", desc("s=1"), desc("m=1")), overall: over,
				want: []st{{ok, "1/SECOND", 0, 1}, {over, "1/MINUTE", 0, 49}}},
		},
	},
	{
		name: "one descriptor twice: the second sees the first's hits",
		files: []string{`
domain: d
descriptors:
  - {key: k, rate_limit: {unit: minute, requests_per_unit: 3}}
`},
		calls: []call{
			{req: rq("d", hits(desc("k=x"), 2), hits(desc("k=x"), 2)), overall: over, want: []st{{ok, "3/MINUTE", 1, 60}, {over, "3/MINUTE", 0, 60}}},
			{req: rq("d", hits(desc("k=x"), 0)), overall: over, want: []st{{over, "3/MINUTE", 0, 60}}},
		},
	},
	{
		name: "quota_mode: over the limit is reported OK, with no time until reset",
		files: []string{`
domain: d
descriptors:
  - {key: q1, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: q2, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 2}}
`},
		calls: []call{
			{req: rq("d", desc("q1=a"), desc("q2=a")), overall: ok, want: []st{{ok, "1/MINUTE", 0, 60}, {ok, "2/MINUTE", 1, 60}}},
			{req: rq("d", desc("q1=a"), desc("q2=a")), overall: ok, want: []st{{ok, "1/MINUTE", 0, 0}, {ok, "2/MINUTE", 0, 60}}},
			{req: rq("d", desc("q1=a"), desc("q2=a")), overall: ok, want: []st{{ok, "1/MINUTE", 0, 0}, {ok, "2/MINUTE", 0, 0}}},
		},
	},
	{
		name: "a request's limit override replaces the configuration",
		files: []string{`
domain: d
descriptors:
  - {key: k, rate_limit: {unit: minute, requests_per_unit: 100}}
`},
		calls: []call{
			{req: rq("d", envoycompat.Descriptor{Entries: []envoycompat.Entry{{Key: "k", Value: "x"}}, Limit: &envoycompat.Override{RequestsPerUnit: 1, Unit: envoycompat.Hour}}), overall: ok, want: []st{{ok, "1/HOUR", 0, 3600}}},
			{req: rq("d", envoycompat.Descriptor{Entries: []envoycompat.Entry{{Key: "k", Value: "x"}}, Limit: &envoycompat.Override{RequestsPerUnit: 1, Unit: envoycompat.Hour}}), overall: over, want: []st{{over, "1/HOUR", 0, 3600}}},
			{req: rq("d", desc("k=x")), overall: ok, want: []st{{ok, "100/MINUTE", 99, 60}}},
		},
	},
	{
		name:  "several domains across files, merged when asked",
		merge: true,
		files: []string{
			"domain: a\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 1}}\n",
			"domain: b\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 2}}\n",
			"domain: a\ndescriptors:\n  - {key: j, rate_limit: {unit: minute, requests_per_unit: 3}}\n",
		},
		calls: []call{
			{req: rq("a", desc("k=x"), desc("j=x")), overall: ok, want: []st{{ok, "1/MINUTE", 0, 60}, {ok, "3/MINUTE", 2, 60}}},
			{req: rq("b", desc("k=x")), overall: ok, want: []st{{ok, "2/MINUTE", 1, 60}}},
		},
	},
	{
		name: "global shadow mode and response headers",
		files: []string{`
domain: d
descriptors:
  - {key: k, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: j, rate_limit: {unit: minute, requests_per_unit: 9}}
`},
		opts: envoycompat.Options{GlobalShadowMode: true, Headers: &envoycompat.HeaderNames{Limit: "L", Remaining: "R", Reset: "T"}},
		calls: []call{
			{req: rq("d", desc("k=x")), overall: ok, want: []st{{ok, "1/MINUTE", 0, 60}}},
			{req: rq("d", desc("j=x"), desc("k=x")), overall: ok, want: []st{{ok, "9/MINUTE", 8, 60}, {over, "1/MINUTE", 0, 60}}},
		},
	},
}

// TestEngine runs every case on both stores.
func TestEngine(t *testing.T) {
	ss := startStores(t)
	for _, store := range storeNames {
		for _, c := range engineCases {
			t.Run(store+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				clk := testkit.NewClock(base)
				opts := c.opts
				opts.Clock = clk.Now
				e, err := envoycompat.New(ss.newStore(t, store), parse(t, envoycompat.LoadOptions{MergeDomains: c.merge}, c.files...), opts)
				if err != nil {
					t.Fatal(err)
				}
				for i, call := range c.calls {
					clk.Set(base.Add(call.at))
					resp, err := e.ShouldRateLimit(context.Background(), call.req)
					if err != nil {
						t.Fatalf("call %d: %v", i, err)
					}
					var have []st
					for _, s := range resp.Statuses {
						have = append(have, got(s))
					}
					if resp.OverallCode != call.overall || fmt.Sprint(have) != fmt.Sprint(call.want) {
						t.Fatalf("call %d %+v:\n got %v %v\nwant %v %v", i, call.req, resp.OverallCode, have, call.overall, call.want)
					}
				}
			})
		}
	}
}

func TestHeaders(t *testing.T) {
	ss := startStores(t)
	for _, store := range storeNames {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			clk := testkit.NewClock(base.Add(15 * time.Second))
			cfg := parse(t, envoycompat.LoadOptions{}, "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 2}}\n  - {key: j, rate_limit: {unit: hour, requests_per_unit: 5}}\n")
			e, err := envoycompat.New(ss.newStore(t, store), cfg, envoycompat.Options{Clock: clk.Now, Headers: &envoycompat.HeaderNames{Limit: "L", Remaining: "R", Reset: "T"}})
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"L=5 R=4 T=3585", "L=2 R=0 T=45", "L=2 R=0 T=45"}
			reqs := []envoycompat.Request{rq("d", desc("j=1")), rq("d", desc("j=1"), hits(desc("k=1"), 2)), rq("d", desc("k=1"), desc("j=1"))}
			for i, r := range reqs {
				resp, err := e.ShouldRateLimit(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				var h []string
				for _, x := range resp.Headers {
					h = append(h, x.Key+"="+x.Value)
				}
				if strings.Join(h, " ") != want[i] {
					t.Errorf("request %d: headers %q, want %q", i, h, want[i])
				}
			}
		})
	}
}

func TestInvalidRequests(t *testing.T) {
	cfg := parse(t, envoycompat.LoadOptions{}, "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 2}}\n")
	e, err := envoycompat.New(stores{}.newStore(t, "memory"), cfg, envoycompat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	big := uint64(tokenlimit.MaxCost + 1)
	for _, c := range []struct {
		req  envoycompat.Request
		want string
	}{
		{rq("", desc("k=x")), "rate limit domain must not be empty"},
		{rq("d"), "rate limit descriptor list must not be empty"},
		{rq("d", hits(desc("k=x"), big)), "descriptors[0].hits_addend: at most"},
		{rq("d", desc("k="+strings.Repeat("v", 1100))), "descriptors[0]: the budget's key would be"},
		{rq("d", envoycompat.Descriptor{Entries: []envoycompat.Entry{{Key: "k"}}, Limit: &envoycompat.Override{RequestsPerUnit: 1}}), "descriptors[0].limit.unit"},
	} {
		_, err := e.ShouldRateLimit(context.Background(), c.req)
		if !errors.Is(err, envoycompat.ErrInvalidRequest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want ErrInvalidRequest with %q", c.req, err, c.want)
		}
	}
}

// TestManyDescriptors checks more descriptors than one store call takes:
// each is still counted once.
func TestManyDescriptors(t *testing.T) {
	ss := startStores(t)
	for _, store := range storeNames {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			cfg := parse(t, envoycompat.LoadOptions{}, "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 1}}\n")
			e, err := envoycompat.New(ss.newStore(t, store), cfg, envoycompat.Options{Clock: func() time.Time { return base }})
			if err != nil {
				t.Fatal(err)
			}
			var ds []envoycompat.Descriptor
			for i := range 2*tokenlimit.MaxItems + 3 {
				ds = append(ds, desc(fmt.Sprintf("k=%d", i)))
			}
			for round, want := range []envoycompat.Code{ok, over} {
				resp, err := e.ShouldRateLimit(context.Background(), rq("d", ds...))
				if err != nil {
					t.Fatal(err)
				}
				for i, s := range resp.Statuses {
					if s.Code != want {
						t.Fatalf("round %d descriptor %d: %v, want %v", round, i, s.Code, want)
					}
				}
			}
		})
	}
}

// TestConcurrentHits checks that concurrent requests on one budget count
// every hit exactly once: of 40 hits on a limit of 25, 25 are admitted.
func TestConcurrentHits(t *testing.T) {
	ss := startStores(t)
	for _, store := range storeNames {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			cfg := parse(t, envoycompat.LoadOptions{}, "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: 25}}\n")
			e, err := envoycompat.New(ss.newStore(t, store), cfg, envoycompat.Options{Clock: func() time.Time { return base }})
			if err != nil {
				t.Fatal(err)
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 40 {
				wg.Go(func() {
					resp, err := e.ShouldRateLimit(context.Background(), rq("d", desc("k=x")))
					if err != nil {
						t.Error(err)
						return
					}
					if resp.OverallCode == ok {
						admitted.Add(1)
					}
				})
			}
			wg.Wait()
			if n := admitted.Load(); n != 25 {
				t.Errorf("admitted %d of 40 on a limit of 25", n)
			}
			resp, err := e.ShouldRateLimit(context.Background(), rq("d", hits(desc("k=x"), 0)))
			if err != nil || resp.Statuses[0].Code != over {
				t.Errorf("after 40 hits on 25: %+v, %v; want over the limit", resp, err)
			}
		})
	}
}
