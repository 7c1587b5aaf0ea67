package ratelimitheader

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

func TestSFString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"llm-budget": `"llm-budget"`,
		`a"b\c`:      `"a\"b\\c"`,
		"tab\there":  `"tab?here"`,
		"é":          `"??"`,
		"a\x7fb":     `"a?b"`,
	} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestRenderings(t *testing.T) {
	t.Parallel()
	denied := tokenlimit.Result{Limit: 10, Remaining: 2, RetryAfter: 1500 * time.Millisecond, ResetAfter: 4001 * time.Millisecond}
	f := Of("api", denied, true, 5*time.Second)
	want := []Pair{
		{"X-Ratelimit-Limit", "10"}, {"X-Ratelimit-Remaining", "2"}, {"X-Ratelimit-Reset", "5"},
		{"Ratelimit", `"api";r=2;t=5`}, {"Ratelimit-Policy", `"api";q=10;w=5`}, {"Retry-After", "2"},
	}
	if got := f.Pairs(); !reflect.DeepEqual(got, want) {
		t.Errorf("Pairs() = %v, want %v", got, want)
	}
	h := http.Header{}
	f.SetHTTP(h)
	if len(h) != len(want) || h.Get("Retry-After") != "2" || h.Get("RateLimit-Policy") != `"api";q=10;w=5` {
		t.Errorf("SetHTTP: %v", h)
	}
	h = http.Header{}
	f.SetOpenAI(h, "Tokens")
	if h.Get("X-Ratelimit-Reset-Tokens") != "4.001s" || h.Get("X-Ratelimit-Limit-Tokens") != "10" || h.Get("X-Ratelimit-Remaining-Tokens") != "2" {
		t.Errorf("SetOpenAI: %v", h)
	}

	// Allowed, or a cost that can never fit: no Retry-After. A window not
	// known: no RateLimit-Policy. A retry under a second still says 1.
	for _, tt := range []struct {
		f     Fields
		retry string
	}{
		{Of("api", tokenlimit.Result{Allowed: true, Limit: 10, Remaining: 9}, false, 0), ""},
		{Of("api", tokenlimit.Result{Limit: 10, Remaining: 10, CostExceedsLimit: true}, true, 0), ""},
		{Of("api", tokenlimit.Result{Limit: 10, RetryAfter: time.Millisecond}, true, 0), "1"},
		{Of("api", tokenlimit.Result{Limit: 10}, true, 0), "1"},
	} {
		h := http.Header{}
		tt.f.SetHTTP(h)
		if h.Get("Retry-After") != tt.retry || h.Get("RateLimit-Policy") != "" || h.Get("RateLimit") == "" {
			t.Errorf("%+v: %v, want Retry-After %q and no policy", tt.f, h, tt.retry)
		}
	}
}

func TestCeilMillis(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", time.Nanosecond: "1ms", 2970 * time.Millisecond: "2.97s", 6 * time.Minute: "6m0s",
		59700*time.Millisecond + 1: "59.701s",
	} {
		if got := CeilMillis(d).String(); got != want {
			t.Errorf("CeilMillis(%v) = %s, want %s", d, got, want)
		}
	}
}

// RenderLower renders what Pairs does, the names in lower case, with and
// without RateLimit-Policy and Retry-After.
func TestRenderLowerIsPairs(t *testing.T) {
	t.Parallel()
	for _, f := range []Fields{
		Of("api", tokenlimit.Result{Limit: 10, Remaining: 2, RetryAfter: time.Second}, true, 5*time.Second),
		Of("api", tokenlimit.Result{Allowed: true, Limit: 10, Remaining: 9}, false, 5*time.Second),
		Of("api", tokenlimit.Result{Limit: 10, RetryAfter: time.Second}, true, 0),
		Of("api", tokenlimit.Result{Allowed: true, Limit: 10, Remaining: 9}, false, 0),
	} {
		var values [6]string
		names, n := f.RenderLower(&values)
		pairs := f.Pairs()
		if n != len(pairs) {
			t.Fatalf("%+v: RenderLower gave %d headers, Pairs %d", f, n, len(pairs))
		}
		for i, p := range pairs {
			if names[i] != strings.ToLower(p.Name) || values[i] != p.Value {
				t.Errorf("%+v: header %d is %s: %s, want %s: %s", f, i, names[i], values[i], strings.ToLower(p.Name), p.Value)
			}
		}
	}
}
