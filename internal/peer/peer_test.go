package peer

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for remote, want := range map[string]bool{
		"127.0.0.1:80": true, "127.9.9.9:80": true, "[::1]:80": true, "[::ffff:127.0.0.1]:80": true,
		"10.0.0.1:80": false, "[2001:db8::1]:80": false, "garbage": false, "": false,
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		if got := IsLoopback(r); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", remote, got, want)
		}
	}
}

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
		if got := ClientIP(r, trusted).String(); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestBearer(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Bearer abc": "abc", "bearer  abc ": "abc", " Bearer abc": "abc", "Basic abc": "", "abc": "", "": "",
	} {
		if got := Bearer(in); got != want {
			t.Errorf("Bearer(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTokenCarriedBy(t *testing.T) {
	t.Parallel()
	tok := NewToken("s3cret")
	for header, want := range map[string]bool{
		"Bearer s3cret": true, "bearer s3cret": true, "Bearer wrong": false, "Basic s3cret": false, "s3cret": false, "": false,
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		if got := tok.CarriedBy(r); got != want {
			t.Errorf("Authorization %q: %v, want %v", header, got, want)
		}
	}
	if NewToken("").CarriedBy(httptest.NewRequest("GET", "/", nil)) {
		t.Error("an empty token matched a request with none")
	}
}

func TestClientGroup(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"::1", "::/64"},
	} {
		if got := ClientGroup(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("ClientGroup(%s) = %q, want %q", c.addr, got, c.want)
		}
	}
	if got := ClientGroup(netip.Addr{}); got != "" {
		t.Errorf("ClientGroup(invalid) = %q, want empty", got)
	}
}
