package httpapi

import (
	"errors"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

func TestClientIP(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	cases := []struct {
		name, remote string
		xff          []string
		want         string
	}{
		{"untrusted peer ignores the header", "192.0.2.1:5000", []string{"203.0.113.7"}, "192.0.2.1"},
		{"trusted peer, one hop", "10.1.2.3:5000", []string{"203.0.113.7"}, "203.0.113.7"},
		{"spoofed left entries are ignored", "10.1.2.3:5000", []string{"6.6.6.6, 203.0.113.7, 10.9.9.9"}, "203.0.113.7"},
		{"all hops trusted: the leftmost", "10.1.2.3:5000", []string{"10.0.0.5, 10.0.0.6"}, "10.0.0.5"},
		{"garbage stops at the hop that added it", "10.1.2.3:5000", []string{"203.0.113.7, junk, 10.0.0.6"}, "10.0.0.6"},
		{"empty entry", "10.1.2.3:5000", []string{"203.0.113.7,"}, "10.1.2.3"},
		{"entries with ports", "10.1.2.3:5000", []string{"203.0.113.7:4711, [2001:db8::1]:80"}, "203.0.113.7"},
		{"ipv6 peer", "[2001:db8::5]:443", []string{"2001:db9::1"}, "2001:db9::1"},
		{"ipv4-mapped peer", "[::ffff:10.0.0.1]:80", []string{"::ffff:198.51.100.2"}, "198.51.100.2"},
		{"no header", "10.1.2.3:5000", nil, "10.1.2.3"},
		{"unparsable peer", "pipe", []string{"203.0.113.7"}, "invalid IP"},
	}
	for _, c := range cases {
		r := &http.Request{RemoteAddr: c.remote, Header: http.Header{}}
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := clientIP(r, trusted).String(); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestWindowSeconds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		limit tokenlimit.Limit
		want  int64
	}{
		{tokenlimit.TokenBucketLimit(10, 2, time.Second), 5},
		{tokenlimit.TokenBucketLimit(10, 3, time.Second), 4}, // 3.33 s
		{tokenlimit.TokenBucketLimit(1, 1000, time.Second), 1},
		{tokenlimit.GCRALimit(9, 60, time.Minute), 10},
		{tokenlimit.TokenBucketLimit(10000, 1, 24*time.Hour), 10000 * 24 * 3600},
		{tokenlimit.SlidingLogLimit(5, 5*time.Second), 5},
		{tokenlimit.FixedWindowLimit(5, 1500*time.Millisecond), 2},
		{tokenlimit.SlidingCounterLimit(5, time.Millisecond), 1},
	}
	for _, c := range cases {
		if err := c.limit.Validate(); err != nil {
			t.Fatalf("%s: %v", c.limit, err)
		}
		if got := windowSeconds(c.limit); got != c.want {
			t.Errorf("windowSeconds(%s) = %d, want %d", c.limit, got, c.want)
		}
	}
}

func TestSFString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"llm-budget": `"llm-budget"`,
		`a"b\c`:      `"a\"b\\c"`,
		"tab\there":  `"tab?here"`,
		"é":          `"??"`,
	} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSecretHint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                         "…(0 bytes)",
		"abc":                      "…(3 bytes)",
		"sk-12345":                 "sk…(8 bytes)",
		"sk-live-0123456789abcdef": "sk-l…(24 bytes)",
	} {
		if got := secretHint(in); got != want {
			t.Errorf("secretHint(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestScrubbed(t *testing.T) {
	t.Parallel()
	err := errors.New("service: reset tokens|api_key=sk-live-0123456789abcdef|model=x: down; api_key=ab%7Ccd: x")
	want := "service: reset tokens|api_key=sk-l…(24 bytes)|model=x: down; api_key=a…(7 bytes): x"
	if got := scrubbed(err); got != want {
		t.Errorf("scrubbed:\n%s\nwant\n%s", got, want)
	}
}
