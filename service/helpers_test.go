package service_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/service"
)

// D is a request's descriptors.
type D = map[string]string

// t0 is the base time of most tests: a Thursday, mid-morning UTC.
var t0 = time.Date(2026, 1, 15, 9, 30, 0, 0, time.UTC)

// env is a service under test with its clock, metrics and store.
type env struct {
	t     *testing.T
	svc   *service.Service
	clock *testkit.Clock
	reg   *prometheus.Registry
	store tokenlimit.Store
	redis *redistest.Server // nil for the memory store
}

// newEnv starts a service on the named store (testkit.Memory or
// testkit.Redis) enforcing the YAML configuration yml, at time start of a
// fake clock. On Redis it starts a redis-server of its own and decides at
// the fake clock's time (CallerTime). edit, if given, changes the options
// last.
func newEnv(t *testing.T, store, yml string, start time.Time, edit ...func(*service.Options)) *env {
	t.Helper()
	te := testkit.NewService(t, testkit.Setup{
		Store: store, Config: testkit.ParseConfig(t, yml), Start: start, Metrics: true,
		Edit: func(o *service.Options) {
			for _, f := range edit {
				f(o)
			}
		},
	})
	return &env{t: t, svc: te.Service, clock: te.Clock, reg: te.Registry, store: te.Store, redis: te.Redis}
}

// check decides one request, failing the test on an error.
func (e *env) check(desc D, cost int64) service.Decision {
	e.t.Helper()
	return e.checkAll(service.Request{Descriptors: desc, Cost: cost})
}

func (e *env) checkAll(reqs ...service.Request) service.Decision {
	e.t.Helper()
	d, err := e.svc.Check(context.Background(), reqs...)
	if err != nil {
		e.t.Fatalf("Check(%+v): %v", reqs, err)
	}
	return d
}

// inspect reports the budgets desc selects without charging.
func (e *env) inspect(desc D) service.Decision {
	e.t.Helper()
	d, err := e.svc.Inspect(context.Background(), service.Request{Descriptors: desc})
	if err != nil {
		e.t.Fatalf("Inspect(%v): %v", desc, err)
	}
	return d
}

// remaining is the Remaining of limit name for desc, read with Inspect.
func (e *env) remaining(desc D, name string) int64 {
	e.t.Helper()
	return mustOutcome(e.t, e.inspect(desc), name).Remaining
}

// outcome returns the outcome of the limit named name.
func outcome(d service.Decision, name string) (service.Outcome, bool) {
	for _, o := range d.Limits {
		if o.Name == name {
			return o, true
		}
	}
	return service.Outcome{}, false
}

func mustOutcome(t testing.TB, d service.Decision, name string) service.Outcome {
	t.Helper()
	o, ok := outcome(d, name)
	if !ok {
		t.Fatalf("no outcome for limit %q in %s", name, describe(d))
	}
	return o
}

// names lists the limits of a decision, in order.
func names(d service.Decision) []string {
	out := []string{}
	for _, o := range d.Limits {
		out = append(out, o.Name)
	}
	return out
}

// describe prints a decision compactly for failure messages.
func describe(d service.Decision) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "{allowed=%v unavailable=%v", d.Allowed, d.Unavailable)
	for _, o := range d.Limits {
		fmt.Fprintf(&sb, " [%s key=%q req=%d cost=%d shadow=%v failopen=%v allowed=%v limit=%d remaining=%d retry=%v reset=%v]",
			o.Name, o.Key, o.Request, o.Cost, o.Shadow, o.FailOpen, o.Allowed, o.Limit, o.Remaining, o.RetryAfter, o.ResetAfter)
	}
	return sb.String() + "}"
}

// metricLabels lists the label sets recorded for name, as "k=v,k=v" sorted.
func metricLabels(t testing.TB, reg prometheus.Gatherer, name string) []string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var parts []string
			for _, l := range m.GetLabel() {
				parts = append(parts, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(parts)
			out = append(out, strings.Join(parts, ","))
		}
	}
	slices.Sort(out)
	return out
}
