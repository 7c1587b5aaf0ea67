package peer

import (
	"net/http/httptest"
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
