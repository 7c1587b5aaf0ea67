package memstore

import (
	"testing"

	"github.com/tokenlimit/tokenlimit"
)

// Keys whose hashes share a map slot are chained: each is found, created,
// swept and removed on its own. Real 64-bit collisions are too rare to hit,
// so the test gives three keys the same hash.
func TestSharedSlotKeepsKeysApart(t *testing.T) {
	s, err := New(Options{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	const h = 42
	alg := tokenlimit.TokenBucket
	a, b, c := s.create(h, alg, "a"), s.create(h, alg, "b"), s.create(h, alg, "c")
	s.keys.Add(3)
	a.expires, b.expires, c.expires = 100, 50, 100
	for _, k := range []struct {
		key  string
		want *entry
	}{{"a", a}, {"b", b}, {"c", c}, {"d", nil}} {
		if got := s.lookup(h, alg, k.key); got != k.want {
			t.Errorf("lookup(%q) = %p, want %p", k.key, got, k.want)
		}
	}
	if got := s.lookup(h, tokenlimit.GCRA, "a"); got != nil {
		t.Errorf("lookup under another algorithm = %p, want nil", got)
	}
	s.sweepShard(&s.shards[0], 60) // b has expired
	if s.lookup(h, alg, "b") != nil || s.lookup(h, alg, "a") != a || s.lookup(h, alg, "c") != c || s.Len() != 2 {
		t.Fatalf("after sweeping b: a=%p c=%p b=%p len=%d", s.lookup(h, alg, "a"), s.lookup(h, alg, "c"), s.lookup(h, alg, "b"), s.Len())
	}
	s.remove(h, alg, "c") // the head of the chain
	if s.lookup(h, alg, "c") != nil || s.lookup(h, alg, "a") != a || s.Len() != 1 {
		t.Fatalf("after removing c: a=%p c=%p len=%d", s.lookup(h, alg, "a"), s.lookup(h, alg, "c"), s.Len())
	}
	s.remove(h, alg, "a")
	if len(s.shards[0].entries) != 0 || s.Len() != 0 {
		t.Fatalf("after removing every key: %d slots, len %d", len(s.shards[0].entries), s.Len())
	}
}
