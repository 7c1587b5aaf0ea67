package config_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
)

// TestInvalidConfigs loads every testdata/invalid/*.yaml and compares the
// error with the exact text of the .err file beside it (one error a line, in
// line order). Add a case by adding a pair of files.
func TestInvalidConfigs(t *testing.T) {
	t.Parallel()
	fixtures, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(fixtures) < 40 {
		t.Fatalf("found %d fixtures in testdata/invalid, want the whole folder (run from the package directory)", len(fixtures))
	}
	// Every .err has its .yaml, so that no fixture is silently dropped.
	errFiles, err := filepath.Glob("testdata/invalid/*.err")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errFiles {
		if _, err := os.Stat(strings.TrimSuffix(e, ".err") + ".yaml"); err != nil {
			t.Errorf("%s has no .yaml beside it", e)
		}
	}
	for _, path := range fixtures {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, err := os.ReadFile(strings.TrimSuffix(path, ".yaml") + ".err")
			if err != nil {
				t.Fatalf("every invalid fixture needs a .err file with the error it must produce: %v", err)
			}
			cfg, err := config.Load(path)
			if err == nil {
				t.Fatalf("Load(%s) = %+v, want an error", path, cfg)
			}
			if cfg != nil {
				t.Errorf("Load(%s) returned a configuration with its error", path)
			}
			if got, want := err.Error(), strings.TrimRight(string(want), "\n"); got != want {
				t.Errorf("Load(%s) error:\n%s\nwant:\n%s", path, got, want)
			}
			// Parse of the same bytes says the same, naming the source given.
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			_, perr := config.Parse(data, "other.yaml")
			if perr == nil || strings.ReplaceAll(perr.Error(), "other.yaml", path) != strings.TrimRight(string(want), "\n") {
				t.Errorf("Parse(..., other.yaml) error:\n%v\nwant the same as Load's, naming other.yaml", perr)
			}
		})
	}
}

// Every error line has the form "file:line: path: reason" (or
// "file:line:column: ..." inside a flow collection such as {a: 1, b: 2})
// or, for a file with nothing in it, "file: reason".
func TestInvalidConfigsErrorForm(t *testing.T) {
	t.Parallel()
	fixtures, _ := filepath.Glob("testdata/invalid/*.yaml")
	for _, path := range fixtures {
		_, err := config.Load(path)
		if err == nil {
			t.Errorf("%s: no error", path)
			continue
		}
		for line := range strings.SplitSeq(err.Error(), "\n") {
			rest, ok := strings.CutPrefix(line, path+":")
			if !ok {
				t.Errorf("%s: error line %q does not start with the file name", path, line)
				continue
			}
			if rest == " the file is empty" {
				continue
			}
			pos, _, ok := strings.Cut(rest, ": ")
			num, col, hasCol := strings.Cut(pos, ":")
			if !ok || !positive(num) || (hasCol && !positive(col)) {
				t.Errorf("%s: error line %q has no line number after the file name", path, line)
			}
		}
	}
}

// positive reports whether s is a whole number above 0 in decimal digits.
func positive(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == "" && strings.Trim(s, "0") != ""
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := config.Load("testdata/no-such-file.yaml")
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "testdata/no-such-file.yaml") {
		t.Fatalf("Load of a missing file: %v, want an fs.ErrNotExist naming the file", err)
	}
}

// TestExamplesLoad loads every file in examples/: they are what users copy.
func TestExamplesLoad(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no examples found in ../examples")
	}
	for _, f := range files {
		if filepath.Base(f) == "envoy.yaml" {
			continue // Envoy's own configuration, checked against Envoy's protos in cli
		}
		cfg, err := config.Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(cfg.Limits) == 0 || cfg.Source != f {
			t.Errorf("%s: %d limits, source %q", f, len(cfg.Limits), cfg.Source)
		}
		for _, l := range cfg.Limits {
			if err := l.Limit.Validate(); err != nil {
				t.Errorf("%s: limit %s: %v", f, l.Name, err)
			}
		}
	}
}

// The quickstart is what the README's first command serves; its two limits
// are the ones the README and docs/api.md walk through.
func TestQuickstartExample(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []config.Limit{
		{
			Name: "hard-cap", Match: map[string]config.Pattern{"route": "/v1/sensitive"}, Key: []string{"user"},
			Limit: tokenlimit.SlidingLogLimit(5, 5*time.Second), FailOpen: true, FailOpenShare: 1, Line: 6,
		},
		{
			Name: "llm-budget", Match: map[string]config.Pattern{}, Key: []string{"user"},
			Limit:    tokenlimit.TokenBucketLimit(10, 2, time.Second),
			Cost:     config.Cost{By: "route", Weights: map[string]int64{"/v1/chat": 1, "/v1/embed": 3}, Default: 1},
			FailOpen: true, FailOpenShare: 1, Line: 14,
		},
	}
	if !reflect.DeepEqual(cfg.Limits, want) {
		t.Fatalf("quickstart limits:\n%+v\nwant:\n%+v", cfg.Limits, want)
	}
	if cfg.Location != time.UTC || cfg.DefaultPlan != "" || len(cfg.APIKeys) != 0 {
		t.Errorf("quickstart: location %v, default plan %q, %d api keys; want UTC, none, none", cfg.Location, cfg.DefaultPlan, len(cfg.APIKeys))
	}
}

// TestParseFull reads a file using every feature and checks the whole
// result.
func TestParseFull(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load("testdata/valid/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Location.String() != "America/New_York" || cfg.DefaultPlan != "free" || cfg.Source != "testdata/valid/full.yaml" {
		t.Errorf("location %v, default plan %q, source %q", cfg.Location, cfg.DefaultPlan, cfg.Source)
	}
	day, month := 24*time.Hour, 31*24*time.Hour
	want := []config.Limit{
		{
			Name: "tokens", Match: map[string]config.Pattern{"model": "gpt-*", "route": "*"}, Key: []string{"api_key", "model"},
			Limit: tokenlimit.TokenBucketLimit(40000, 40000, time.Minute), FailOpen: true, FailOpenShare: 1, Line: 6,
		},
		{
			Name: "requests", Match: map[string]config.Pattern{}, Key: []string{"api_key"},
			Limit: tokenlimit.GCRALimit(0, 60, time.Minute), Cost: config.Cost{Constant: 2},
			FailOpen: false, FailOpenShare: 1, Line: 14,
		},
		{
			Name: "weighted", Match: map[string]config.Pattern{"route": "/v1/*"}, Key: []string{"user"},
			Limit:    tokenlimit.SlidingLogLimit(5, 5*time.Second),
			Cost:     config.Cost{By: "route", Weights: map[string]int64{"/v1/chat": 1, "/v1/embed": 3}, Default: 1},
			FailOpen: true, FailOpenShare: 0.25, Line: 22,
		},
		{
			Name: "trial.v2", Match: map[string]config.Pattern{}, Key: []string{"tenant", "team"},
			Limit:  tokenlimit.SlidingCounterLimit(100000, 90*time.Minute),
			Cost:   config.Cost{By: "model", Weights: map[string]int64{}, Default: 7},
			Shadow: true, FailOpen: true, FailOpenShare: 1, Line: 33,
		},
		{
			Name: "daily_cap", Match: map[string]config.Pattern{}, Key: []string{},
			Limit: tokenlimit.FixedWindowLimit(1000, day), Calendar: config.Day, FailOpen: true, FailOpenShare: 1, Line: 40,
		},
		// Plans, sorted by name, each quota a calendar fixed window.
		{
			Name: "plan-free-monthly", Match: map[string]config.Pattern{"plan": "free"}, Key: []string{"api_key"},
			Limit: tokenlimit.FixedWindowLimit(1000000, month), Calendar: config.Month, FailOpen: true, FailOpenShare: 1,
		},
		{
			Name: "plan-pro-daily", Match: map[string]config.Pattern{"plan": "pro"}, Key: []string{"tenant"},
			Limit: tokenlimit.FixedWindowLimit(5000000, day), Calendar: config.Day, FailOpen: true, FailOpenShare: 1,
		},
		{
			Name: "plan-pro-monthly", Match: map[string]config.Pattern{"plan": "pro"}, Key: []string{"tenant"},
			Limit: tokenlimit.FixedWindowLimit(100000000, month), Calendar: config.Month, FailOpen: true, FailOpenShare: 1,
		},
	}
	if len(cfg.Limits) != len(want) {
		t.Fatalf("%d limits, want %d: %+v", len(cfg.Limits), len(want), cfg.Limits)
	}
	for i := range want {
		if !reflect.DeepEqual(cfg.Limits[i], want[i]) {
			t.Errorf("limits[%d]:\n%+v\nwant:\n%+v", i, cfg.Limits[i], want[i])
		}
	}
	wantKeys := map[string]config.Identity{
		"sk-free": {User: "alice", Tenant: "acme", Overrides: map[string]tokenlimit.Limit{}},
		"sk-pro": {User: "bob", Tenant: "globex", Plan: "pro", Overrides: map[string]tokenlimit.Limit{
			"tokens":         tokenlimit.TokenBucketLimit(200000, 200000, time.Minute),
			"requests":       tokenlimit.GCRALimit(99, 600, time.Minute),
			"plan-pro-daily": tokenlimit.FixedWindowLimit(9000000, day),
		}},
	}
	if !reflect.DeepEqual(cfg.APIKeys, wantKeys) {
		t.Errorf("api keys:\n%+v\nwant:\n%+v", cfg.APIKeys, wantKeys)
	}
}

// Absent, "request" and constant costs, and a plan-only file (no limits:).
func TestParseSmallForms(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte("plans:\n  free: {daily: 10}\n"), "plans.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Limits) != 1 || cfg.Limits[0].Name != "plan-free-daily" || cfg.Limits[0].Limit.Quota != 10 {
		t.Fatalf("plan-only file: %+v", cfg.Limits)
	}
	cfg, err = config.Parse([]byte(`
limits:
  - {name: a, algorithm: fixed_window, limit: 1/s}
  - {name: b, algorithm: fixed_window, limit: 1/s, cost: request}
  - {name: c, algorithm: fixed_window, limit: 1/s, cost: 4}
  - {name: d, algorithm: Token-Bucket, capacity: 3, refill: 1/100ms}
`), "forms.yaml")
	if err != nil {
		t.Fatal(err)
	}
	costs := []config.Cost{{}, {}, {Constant: 4}, {}}
	for i, l := range cfg.Limits {
		if !reflect.DeepEqual(l.Cost, costs[i]) || l.Line != i+3 {
			t.Errorf("limit %s: cost %+v line %d, want %+v line %d", l.Name, l.Cost, l.Line, costs[i], i+3)
		}
	}
	if got, want := cfg.Limits[3].Limit, tokenlimit.TokenBucketLimit(3, 1, 100*time.Millisecond); got != want {
		t.Errorf("token bucket from \"Token-Bucket\": %v, want %v", got, want)
	}
}

// Anchors, aliases and merge keys read as YAML defines them: a merged
// mapping gives the fields the mapping does not give itself.
func TestParseAnchorsAndMergeKeys(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
plans:
  free: &quota {daily: 10, key: &keys [tenant]}
  pro: *quota
limits:
  - &base {name: a, key: [user], algorithm: fixed_window, limit: 1/s}
  - <<: *base
    name: b
    limit: 2/s
  - {<<: [*base], name: c, key: *keys}
`), "anchors.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name  string
		key   []string
		quota int64
	}{{"a", []string{"user"}, 1}, {"b", []string{"user"}, 2}, {"c", []string{"tenant"}, 1}, {"plan-free-daily", []string{"tenant"}, 10}, {"plan-pro-daily", []string{"tenant"}, 10}}
	if len(cfg.Limits) != len(want) {
		t.Fatalf("%d limits, want %d: %+v", len(cfg.Limits), len(want), cfg.Limits)
	}
	for i, w := range want {
		l := cfg.Limits[i]
		if l.Name != w.name || !reflect.DeepEqual(l.Key, w.key) || l.Limit.Quota != w.quota || l.Limit.Algorithm != tokenlimit.FixedWindow {
			t.Errorf("limits[%d] = %s key %v quota %d %v, want %s key %v quota %d fixed_window", i, l.Name, l.Key, l.Limit.Quota, l.Limit.Algorithm, w.name, w.key, w.quota)
		}
	}
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		n    int64
		per  time.Duration
		fail bool
	}{
		{in: "10/s", n: 10, per: time.Second},
		{in: "100000/min", n: 100000, per: time.Minute},
		{in: "5/5s", n: 5, per: 5 * time.Second},
		{in: "2/1h30m", n: 2, per: 90 * time.Minute},
		{in: "1/ms", n: 1, per: time.Millisecond},
		{in: "3/sec", n: 3, per: time.Second},
		{in: "3/second", n: 3, per: time.Second},
		{in: "7/m", n: 7, per: time.Minute},
		{in: "7/minute", n: 7, per: time.Minute},
		{in: "1/h", n: 1, per: time.Hour},
		{in: "1/hour", n: 1, per: time.Hour},
		{in: "1000/d", n: 1000, per: 24 * time.Hour},
		{in: "1000/day", n: 1000, per: 24 * time.Hour},
		{in: "1000/7d", n: 1000, per: 7 * 24 * time.Hour},
		{in: "1/250ms", n: 1, per: 250 * time.Millisecond},
		{in: " 10 / s ", n: 10, per: time.Second},
		{in: "1099511627776/s", n: 1 << 40, per: time.Second}, // bounds are Validate's job
		{in: "10", fail: true},
		{in: "", fail: true},
		{in: "/s", fail: true},
		{in: "10/", fail: true},
		{in: "0/s", fail: true},
		{in: "-1/s", fail: true},
		{in: "1.5/s", fail: true},
		{in: "1e3/s", fail: true},
		{in: "ten/s", fail: true},
		{in: "9223372036854775808/s", fail: true},
		{in: "10/fortnight", fail: true},
		{in: "10/0s", fail: true},
		{in: "10/-5s", fail: true},
		{in: "10/0d", fail: true},
		{in: "10/-2d", fail: true},
		{in: "10/1.5d", fail: true},
		{in: "10/s/2", fail: true},
		{in: "10/days", fail: true},
	}
	for _, tt := range tests {
		n, per, err := config.ParseRate(tt.in)
		switch {
		case tt.fail && err == nil:
			t.Errorf("ParseRate(%q) = %d, %v; want an error", tt.in, n, per)
		case tt.fail:
			if !strings.Contains(err.Error(), "got") {
				t.Errorf("ParseRate(%q) error %q does not quote the input", tt.in, err)
			}
		case err != nil || n != tt.n || per != tt.per:
			t.Errorf("ParseRate(%q) = %d, %v, %v; want %d, %v", tt.in, n, per, err, tt.n, tt.per)
		}
	}
}

func TestParsePeriod(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration // 0: an error
	}{
		{"ms", time.Millisecond},
		{"s", time.Second},
		{"sec", time.Second},
		{"second", time.Second},
		{"m", time.Minute},
		{"min", time.Minute},
		{"minute", time.Minute},
		{"h", time.Hour},
		{"hour", time.Hour},
		{"d", 24 * time.Hour},
		{"day", 24 * time.Hour},
		{"30d", 30 * 24 * time.Hour},
		{"1d", 24 * time.Hour},
		{"5s", 5 * time.Second},
		{"1h30m", 90 * time.Minute},
		{"1.5s", 1500 * time.Millisecond},
		{"1500us", 1500 * time.Microsecond}, // whole milliseconds are Validate's job
		{" min ", time.Minute},
		{"", 0},
		{"0", 0},
		{"0s", 0},
		{"-1s", 0},
		{"-1d", 0},
		{"0d", 0},
		{"1.5d", 0},
		{"days", 0},
		{"week", 0},
		{"5", 0},
	}
	for _, tt := range tests {
		got, err := config.ParsePeriod(tt.in)
		if tt.want == 0 {
			if err == nil {
				t.Errorf("ParsePeriod(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParsePeriod(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestPatternMatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern config.Pattern
		value   string
		want    bool
	}{
		{"*", "anything", true},
		{"*", "", true},
		{"/v1/chat", "/v1/chat", true},
		{"/v1/chat", "/v1/chat/", false},
		{"/v1/chat", "/v1/cha", false},
		{"/v1/chat", "/V1/CHAT", false},
		{"/v1/*", "/v1/chat", true},
		{"/v1/*", "/v1/", true},
		{"/v1/*", "/v1", false},
		{"/v1/*", "/v2/chat", false},
		{"gpt-*", "gpt-4o", true},
		{"gpt-*", "GPT-4o", false},
		{"gpt-*", "chatgpt-4o", false},
		{"a*b", "a*b", true}, // only a trailing * is a wildcard
		{"a*b", "axxb", false},
		{"*b", "ab", false},
		{"*b", "*b", true},
	}
	for _, tt := range tests {
		if got := tt.pattern.Matches(tt.value); got != tt.want {
			t.Errorf("Pattern(%q).Matches(%q) = %v, want %v", tt.pattern, tt.value, got, tt.want)
		}
	}
}

func TestCostOf(t *testing.T) {
	t.Parallel()
	byRoute := config.Cost{By: "route", Weights: map[string]int64{"/v1/chat": 1, "/v1/embed": 3}, Default: 2}
	tests := []struct {
		name    string
		cost    config.Cost
		desc    map[string]string
		request int64
		want    int64
	}{
		{"request cost", config.Cost{}, map[string]string{"route": "/v1/embed"}, 1234, 1234},
		{"constant ignores the request", config.Cost{Constant: 5}, map[string]string{"route": "/v1/embed"}, 1234, 5},
		{"weight of the route", byRoute, map[string]string{"route": "/v1/embed"}, 1234, 3},
		{"weight of another route", byRoute, map[string]string{"route": "/v1/chat"}, 1234, 1},
		{"default for an unlisted route", byRoute, map[string]string{"route": "/v1/images"}, 1234, 2},
		{"default when the descriptor is missing", byRoute, map[string]string{"model": "x"}, 1234, 2},
		{"default for nil descriptors", byRoute, nil, 1234, 2},
		{"weights match exactly", byRoute, map[string]string{"route": "/v1/embed/"}, 1234, 2},
		{"spend", config.Cost{Spend: true}, nil, 1234, 777},
		{"no usage: the request's cost is uncached input", config.Cost{Class: config.UncachedInputTokens}, nil, 1234, 1234},
		{"no usage: no output", config.Cost{Class: config.OutputTokens}, nil, 1234, 0},
	}
	for _, tt := range tests {
		if got, err := tt.cost.Of(tt.desc, tt.request, 777, nil); got != tt.want || err != nil {
			t.Errorf("%s: %+v.Of(%v, %d) = %d, %v; want %d", tt.name, tt.cost, tt.desc, tt.request, got, err, tt.want)
		}
	}
}

// exprFunc is a cost expression written in Go.
type exprFunc func(u *config.Usage) (int64, error)

func (f exprFunc) Eval(u *config.Usage, _ map[string]string) (int64, error) { return f(u) }
func (f exprFunc) String() string                                           { return "f" }

func TestCostOfUsage(t *testing.T) {
	t.Parallel()
	u := &config.Usage{Input: 1000, Cached: 600, CacheWrite: 100, Output: 50, Reasoning: 20}
	errOverflow := errors.New("overflow")
	for _, tt := range []struct {
		cost    config.Cost
		want    int64
		wantErr error
	}{
		{config.Cost{Class: config.InputTokens}, 1000, nil},
		{config.Cost{Class: config.UncachedInputTokens}, 400, nil},
		{config.Cost{Class: config.OutputTokens}, 50, nil},
		{config.Cost{Class: config.TotalTokens}, 1050, nil},
		{config.Cost{}, 7, nil}, // the request's own cost
		{config.Cost{Expr: exprFunc(func(u *config.Usage) (int64, error) { return u.Input + 4*u.Output, nil })}, 1200, nil},
		{config.Cost{Expr: exprFunc(func(u *config.Usage) (int64, error) { return u.Output - u.Input, nil })}, 0, config.ErrNegativeCost},
		{config.Cost{Expr: exprFunc(func(*config.Usage) (int64, error) { return tokenlimit.MaxCost + 5, nil })}, tokenlimit.MaxCost, nil},
		{config.Cost{Expr: exprFunc(func(*config.Usage) (int64, error) { return 9, errOverflow })}, 0, errOverflow},
	} {
		got, err := tt.cost.Of(nil, 7, 0, u)
		if got != tt.want || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || (tt.cost.Expr == nil && err != nil) {
			t.Errorf("%+v.Of(usage %+v) = %d, %v; want %d, %v", tt.cost, *u, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestUsageClamped(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, want config.Usage
	}{
		{config.Usage{Input: 10, Cached: 4, CacheWrite: 3, Output: 5, Reasoning: 2}, config.Usage{Input: 10, Cached: 4, CacheWrite: 3, Output: 5, Reasoning: 2}},
		{config.Usage{Input: 10, Cached: 14, CacheWrite: 3, Output: 5, Reasoning: 9}, config.Usage{Input: 10, Cached: 10, CacheWrite: 0, Output: 5, Reasoning: 5}},
		{config.Usage{Input: -1, Cached: -2, Output: tokenlimit.MaxCost + 1, Reasoning: -3}, config.Usage{Output: tokenlimit.MaxCost}},
	} {
		got, changed := tt.in.Clamped()
		if got != tt.want || changed != (tt.in != tt.want) {
			t.Errorf("%+v.Clamped() = %+v, %v; want %+v, %v", tt.in, got, changed, tt.want, tt.in != tt.want)
		}
	}
}

// TestOnExhaust: a budget in tokens or usd stops streams unless it says
// finish; plan quotas stop too.
func TestOnExhaust(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
limits:
  - {name: tokens, algorithm: token_bucket, capacity: 10, refill: 1/s}
  - {name: tokens-finish, algorithm: token_bucket, capacity: 10, refill: 1/s, on_exhaust: finish}
  - {name: tokens-stop, algorithm: token_bucket, capacity: 10, refill: 1/s, on_exhaust: stop}
plans:
  free: {daily: 10}
`), "exhaust.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]config.OnExhaust{"tokens": config.Stop, "tokens-finish": config.Finish, "tokens-stop": config.Stop, "plan-free-daily": config.Stop}
	for _, l := range cfg.Limits {
		if l.OnExhaust != want[l.Name] {
			t.Errorf("limit %s: on_exhaust %v, want %v", l.Name, l.OnExhaust, want[l.Name])
		}
	}
}

// BenchmarkParseManyAPIKeys parses a file of 10,000 api keys: each is
// looked up by its path, so the lookup must not scan every key (it did, and
// 100,000 keys took 6 minutes).
func BenchmarkParseManyAPIKeys(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("plans:\n  pro: {daily: 100}\nlimits:\n  - {name: a, key: [user], algorithm: fixed_window, limit: 10/min}\napi_keys:\n")
	for i := range 10_000 {
		fmt.Fprintf(&sb, "  sk-key-%08d: {user: u%d, plan: pro}\n", i, i)
	}
	data := []byte(sb.String())
	for b.Loop() {
		if _, err := config.Parse(data, "keys.yaml"); err != nil {
			b.Fatal(err)
		}
	}
}

// A lease reads as its terms, on every algorithm that takes one; a
// calendar month's lease may outlive the day its quota is written per; a
// usd budget's lease is in dollars, as its limit (micro-dollars inside).
func TestParseLease(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
limits:
  - {name: bucket, algorithm: token_bucket, capacity: 1000, refill: 100/s, lease: {size: 100, ttl: 2s}}
  - {name: cell, algorithm: gcra, rate: 100/s, max_burst: 99, lease: {size: 10, ttl: 500ms}}
  - {name: window, algorithm: fixed_window, limit: 1000/min, lease: {size: 50, ttl: 1m}}
  - {name: monthly, algorithm: fixed_window, limit: 5000/day, calendar: month, lease: {size: 50, ttl: 48h}}
  - {name: plain, algorithm: fixed_window, limit: 1000/min}
  - {name: spend, algorithm: fixed_window, unit: usd, limit: 50/month, lease: {size: 0.25, ttl: 1m}}
`), "lease.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []tokenlimit.Lease{{Size: 100, TTL: 2 * time.Second}, {Size: 10, TTL: 500 * time.Millisecond},
		{Size: 50, TTL: time.Minute}, {Size: 50, TTL: 48 * time.Hour}, {}, {Size: 250_000, TTL: time.Minute}}
	for i, l := range cfg.Limits {
		if l.Lease != want[i] {
			t.Errorf("limit %s: lease %+v, want %+v", l.Name, l.Lease, want[i])
		}
	}
}
