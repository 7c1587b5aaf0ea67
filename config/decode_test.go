package config

import "testing"

func TestNearest(t *testing.T) {
	t.Parallel()
	known := []string{"name", "algorithm", "limit", "capacity", "refill", "rate", "max_burst", "max_keys", "failure_mode", "fail_open_share"}
	for _, tt := range []struct{ in, want string }{
		{"algoritm", "algorithm"},  // a letter left out
		{"algorihtm", "algorithm"}, // two letters swapped
		{"Algorithm", "algorithm"}, // case
		{"refil", "refill"},        //
		{"nmae", "name"},           // a swap in a short name
		{"limits", "limit"},        // a letter more
		{"failure-mode", "failure_mode"},
		{"max_burts", "max_burst"},
		{"burst", ""},  // a part of max_burst, not a typo of it
		{"colour", ""}, // nothing near
		{"algo", ""},   // too far: five letters left out
		{"fail_open_shares", "fail_open_share"},
		{"", ""},
	} {
		if got := nearest(tt.in, known); got != tt.want {
			t.Errorf("nearest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"abc", "abc", 0},
		{"abc", "abd", 1}, {"abc", "acb", 1}, {"abc", "ab", 1}, {"ab", "abc", 1},
		{"kitten", "sitting", 3}, {"ca", "abc", 3},
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
