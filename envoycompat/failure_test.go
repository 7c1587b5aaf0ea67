package envoycompat_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tokenlimit/tokenlimit/envoycompat"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// failureYAML has a domain with limits at several depths (a key-only
// descriptor, a value with a nested one, a value without a limit of its
// own above limited ones, a shadow one) and a second domain.
var failureYAML = []string{`
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: internal
    rate_limit: {unlimited: true}
  - key: plan
    value: free
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 100}
      - key: ip
        shadow_mode: true
        rate_limit: {unit: day, requests_per_unit: 100}
`, `
domain: legacy
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
`}

func TestParseFailureModes(t *testing.T) {
	t.Parallel()
	m, err := envoycompat.ParseFailureModes([]string{"open", "api=closed", "api.path_/login=open", "api.path_/a=b=Closed", "edge.proxy=error"})
	want := map[string]envoycompat.FailureMode{"api": envoycompat.FailClosed, "api.path_/login": envoycompat.FailOpen,
		"api.path_/a=b": envoycompat.FailClosed, "edge.proxy": envoycompat.FailError}
	if err != nil || m.Default != envoycompat.FailOpen || fmt.Sprint(m.Paths) != fmt.Sprint(want) {
		t.Errorf("ParseFailureModes: %+v %v, want default open and %v", m, err, want)
	}
	for _, c := range []struct {
		specs []string
		want  string
	}{
		{[]string{"loud"}, `loud: mode "loud": want error, closed or open`},
		{[]string{"api.user=loud"}, `api.user=loud: mode "loud": want error, closed or open`},
		{[]string{"=closed"}, "=closed: the domain or descriptor path before '=' must not be empty (want MODE, DOMAIN=MODE or DOMAIN.KEY[_VALUE]...=MODE)"},
		{[]string{"api="}, `api=: mode "": want error, closed or open`},
		{[]string{"open", "closed"}, "closed: the default mode is already set by open"},
		{[]string{"api.user=open", "api.user=closed"}, "api.user=closed: api.user is given a mode twice"},
	} {
		if _, err := envoycompat.ParseFailureModes(c.specs); err == nil || err.Error() != c.want {
			t.Errorf("%q: %v, want %q", c.specs, err, c.want)
		}
	}
}

// TestFailureModesCheck: a path must name a domain or a descriptor of the
// configuration, at New and at every SetConfig (the running one stays).
func TestFailureModesCheck(t *testing.T) {
	t.Parallel()
	cfg := parse(t, envoycompat.LoadOptions{}, failureYAML...)
	good, err := envoycompat.ParseFailureModes([]string{"api=open", "legacy=closed", "api.user=closed", "api.path_/login.user=open", "api.plan_free=closed", "api.plan_free.ip=open"})
	if err != nil {
		t.Fatal(err)
	}
	if err := good.Check(cfg); err != nil {
		t.Errorf("Check of paths the configuration has: %v", err)
	}
	bad, err := envoycompat.ParseFailureModes([]string{"api.usr=closed", "api.path_/login=open", "ap=open", "api.user_bob=open"})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Check(cfg); err == nil || !strings.HasPrefix(err.Error(), "ap=open, api.user_bob=open, api.usr=closed: no such domain or descriptor in the configuration") {
		t.Errorf("Check of unknown paths: %v", err)
	}
	if _, err := envoycompat.New(testkit.MemStore(t), cfg, envoycompat.Options{FailureModes: bad}); err == nil || !strings.Contains(err.Error(), "api.usr=closed") {
		t.Errorf("New with unknown paths: %v", err)
	}
	e, err := envoycompat.New(testkit.MemStore(t), cfg, envoycompat.Options{FailureModes: good})
	if err != nil {
		t.Fatal(err)
	}
	smaller := parse(t, envoycompat.LoadOptions{}, failureYAML[0])
	if err := e.SetConfig(smaller); err == nil || !strings.Contains(err.Error(), "legacy=closed") || e.Config() != cfg {
		t.Errorf("SetConfig without legacy: %v, config replaced: %v", err, e.Config() != cfg)
	}
}

// TestFailureModesPerDescriptor decides requests on a store that is down
// (through resilient.Store, as serve runs it): each descriptor answers by
// the mode of its most specific path, and a request mixing modes is
// OVER_LIMIT when a descriptor fails closed, else fails when one fails with
// error, else is OK.
func TestFailureModesPerDescriptor(t *testing.T) {
	t.Parallel()
	fs := &testkit.FaultStore{Store: testkit.MemStore(t), Info: testkit.Remote}
	fs.Set(testkit.Down)
	guarded, err := resilient.New(fs, resilient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	modes, err := envoycompat.ParseFailureModes([]string{"api=open", "api.path_/login=closed", "api.path_/login.user=open", "api.plan_free=closed", "api.user=error"})
	if err != nil {
		t.Fatal(err)
	}
	e, err := envoycompat.New(guarded, parse(t, envoycompat.LoadOptions{}, failureYAML...), envoycompat.Options{FailureModes: modes})
	if err != nil {
		t.Fatal(err)
	}
	override := desc("user=a")
	override.Limit = &envoycompat.Override{RequestsPerUnit: 1, Unit: envoycompat.Hour}
	for _, c := range []struct {
		name    string
		req     envoycompat.Request
		overall envoycompat.Code // CodeUnknown: the call fails
		want    []st
	}{
		{"a value's own mode", rq("api", desc("path=/login")), over, []st{{code: over, limit: "5/MINUTE"}}},
		{"a nested descriptor's own mode beats its parent's", rq("api", desc("path=/login", "user=a")), ok, []st{{code: ok, limit: "2/MINUTE"}}},
		{"a nested descriptor takes its parent's", rq("api", desc("plan=free", "user=a")), over, []st{{code: over, limit: "100/DAY"}}},
		{"shadow mode is never over", rq("api", desc("plan=free", "ip=x")), ok, []st{{code: ok, limit: "100/DAY"}}},
		{"a key-only descriptor's mode", rq("api", desc("user=a")), envoycompat.CodeUnknown, nil},
		{"an override takes its domain's", rq("api", override), ok, []st{{code: ok, limit: "1/HOUR"}}},
		{"closed and open: over", rq("api", desc("path=/login"), desc("path=/login", "user=a")), over, []st{{code: over, limit: "5/MINUTE"}, {code: ok, limit: "2/MINUTE"}}},
		{"closed and error: over", rq("api", desc("user=a"), desc("path=/login")), over, []st{{code: ok, limit: "10/HOUR"}, {code: over, limit: "5/MINUTE"}}},
		{"error and open: the call fails", rq("api", desc("user=a"), desc("path=/login", "user=a")), envoycompat.CodeUnknown, nil},
		{"a descriptor no limit applies to takes no mode", rq("api", desc("path=/login", "user=a"), desc("other=x"), desc("internal=x")), ok,
			[]st{{code: ok, limit: "2/MINUTE"}, {code: ok}, {code: ok, remaining: ^uint32(0)}}},
		{"the default", rq("legacy", desc("user=a")), envoycompat.CodeUnknown, nil},
	} {
		resp, err := e.ShouldRateLimit(context.Background(), c.req)
		if c.overall == envoycompat.CodeUnknown {
			if !errors.Is(err, resilient.ErrUnavailable) {
				t.Errorf("%s: %+v %v, want an error matching resilient.ErrUnavailable", c.name, resp, err)
			}
			continue
		}
		var have []st
		for _, s := range resp.Statuses {
			have = append(have, got(s))
		}
		if err != nil || !resp.StoreUnavailable || resp.OverallCode != c.overall || fmt.Sprint(have) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v %v %v (store unavailable: %v), want %v %v", c.name, resp.OverallCode, have, err, resp.StoreUnavailable, c.overall, c.want)
		}
	}
	if fs.Checks() != 0 {
		t.Errorf("%d checks reached the store, want none (it is down)", fs.Checks())
	}
}
