package costexpr_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/proxy/costexpr"
)

// TestInvalidExpressions loads every testdata/invalid/*.yaml with the CEL
// compiler and compares the error with the .err file beside it: each names
// file:line:col, the column being the expression's own in the file.
func TestInvalidExpressions(t *testing.T) {
	t.Parallel()
	fixtures, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil || len(fixtures) < 5 {
		t.Fatalf("found %d fixtures (%v), want the whole folder", len(fixtures), err)
	}
	for _, path := range fixtures {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			want, err := os.ReadFile(strings.TrimSuffix(path, ".yaml") + ".err")
			if err != nil {
				t.Fatalf("every fixture needs a .err file: %v", err)
			}
			cfg, err := config.LoadWith(path, config.Options{Compile: costexpr.Compile})
			if err == nil {
				t.Fatalf("LoadWith(%s) = %+v, want an error", path, cfg)
			}
			if got, want := err.Error(), strings.TrimRight(string(want), "\n"); got != want {
				t.Errorf("LoadWith(%s) error:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}

func mustCompile(t *testing.T, src string) config.Expr {
	t.Helper()
	e, err := costexpr.Compile(src)
	if err != nil {
		t.Fatalf("Compile(%q): %v", src, err)
	}
	return e
}

// TestEval evaluates the examples on a usage of every class.
func TestEval(t *testing.T) {
	t.Parallel()
	u := &config.Usage{Input: 1000, Cached: 600, CacheWrite: 100, Output: 50, Reasoning: 20}
	desc := map[string]string{"model": "o3", "route": "/v1/chat/completions", "tenant": "acme"}
	for _, tt := range []struct {
		src  string
		want int64
	}{
		{"input_tokens + 4 * output_tokens", 1200},
		{"output_tokens", 50},
		{"input_tokens - cached_input_tokens", 400},
		{`model == "o3" ? 2 * total_tokens : total_tokens`, 2100},
		{"cache_write_tokens + reasoning_tokens", 120},
		{`route.startsWith("/v1/chat") ? 1 : 0`, 1},
		{`descriptors["tenant"] == "acme" ? output_tokens : 0`, 50},
		{`"team" in descriptors ? 1 : input_tokens`, 1000},
	} {
		got, err := mustCompile(t, tt.src).Eval(u, desc)
		if err != nil || got != tt.want {
			t.Errorf("%s = %d, %v; want %d", tt.src, got, err, tt.want)
		}
	}
	// A missing descriptor is a run-time error, which the service charges
	// as 0 and counts.
	if got, err := mustCompile(t, `descriptors["team"] == "x" ? 1 : 2`).Eval(u, desc); err == nil {
		t.Errorf("a missing descriptor = %d, want an error", got)
	}
	// So is an overflow.
	big := &config.Usage{Output: tokenlimit.MaxCost}
	if got, err := mustCompile(t, "output_tokens * output_tokens * output_tokens").Eval(big, desc); err == nil {
		t.Errorf("an overflow = %d, want an error", got)
	}
}

// TestValidExpressionsLoad: the contract's forms load.
func TestValidExpressionsLoad(t *testing.T) {
	t.Parallel()
	const yml = `
limits:
  - name: weighted
    key: [api_key]
    algorithm: token_bucket
    capacity: 100000
    refill: 100000/min
    cost: {expr: "input_tokens + 4 * output_tokens"}
  - name: by-model
    algorithm: fixed_window
    limit: 100000/min
    cost: {expr: 'model == "o3" ? 2 * total_tokens : total_tokens'}
  - name: itpm
    algorithm: fixed_window
    limit: 100000/min
    cost: uncached_input_tokens
`
	cfg, err := config.ParseWith([]byte(yml), "ok.yaml", config.Options{Compile: costexpr.Compile})
	if err != nil {
		t.Fatal(err)
	}
	if e := cfg.Limits[0].Cost.Expr; e == nil || e.String() != "input_tokens + 4 * output_tokens" {
		t.Errorf("limits[0].Cost.Expr = %v", e)
	}
	if c := cfg.Limits[2].Cost; c.Class != config.UncachedInputTokens || c.Expr != nil {
		t.Errorf("cost: uncached_input_tokens = %+v, want the class, no expression", c)
	}
}

func BenchmarkCompile(b *testing.B) {
	for b.Loop() {
		if _, err := costexpr.Compile(`model == "o3" ? 2 * total_tokens : total_tokens`); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEval is one evaluation of the widest example.
func BenchmarkEval(b *testing.B) {
	e, err := costexpr.Compile(`model == "o3" ? 2 * total_tokens : total_tokens`)
	if err != nil {
		b.Fatal(err)
	}
	u := &config.Usage{Input: 1000, Cached: 600, Output: 50}
	desc := map[string]string{"model": "o3", "route": "/v1/chat/completions"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Eval(u, desc); err != nil {
			b.Fatal(err)
		}
	}
}
