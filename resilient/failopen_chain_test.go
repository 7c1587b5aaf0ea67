package resilient

import (
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// Budgets whose hashes share a map slot are chained: each keeps its own
// answer, and evicting one leaves the others. Real 64-bit collisions are
// too rare to hit, so the test gives three budgets the same hash.
func TestFailOpenSharedSlotKeepsBudgetsApart(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f := NewFailOpen(3*failOpenShards, time.Minute, func(string, string, int64) {})
	const h = 42
	alg := tokenlimit.FixedWindow
	keys := []budgetKey{{"a", alg, h}, {"b", alg, h}, {"c", alg, h}}
	sh := f.shard(keys[0])
	for i, k := range keys {
		m := f.add(sh, k, now)
		m.known, m.remaining = true, int64(i)
		m.reset = now.Add(time.Duration(i+1) * time.Second)
	}
	remaining := func(k budgetKey) (int64, bool) {
		m := f.find(sh, k)
		if m == nil {
			return 0, false
		}
		return m.remaining, true
	}
	for i, k := range keys {
		if got, ok := remaining(k); !ok || got != int64(i) {
			t.Errorf("budget %q: remaining %d (found %v), want %d", k.key, got, ok, i)
		}
	}
	if _, ok := remaining(budgetKey{"a", tokenlimit.GCRA, h}); ok {
		t.Error("budget a under another algorithm found a's entry")
	}
	if _, ok := remaining(budgetKey{"d", alg, h}); ok {
		t.Error("budget d, never remembered, found an entry")
	}
	// The shard is full: a new budget evicts the entry that ends first, a.
	f.add(sh, budgetKey{"d", alg, h}, now)
	if _, ok := remaining(keys[0]); ok || sh.n != 3 {
		t.Errorf("after evicting: a found %v, %d entries; want a gone, 3 entries", ok, sh.n)
	}
	// d, the chain's head, has no answer: it ends first and goes next.
	f.add(sh, budgetKey{"e", alg, h}, now)
	if _, ok := remaining(budgetKey{"d", alg, h}); ok || sh.n != 3 {
		t.Errorf("after evicting again: d found %v, %d entries; want d gone, 3 entries", ok, sh.n)
	}
	for i, k := range keys[1:] {
		if got, ok := remaining(k); !ok || got != int64(i+1) {
			t.Errorf("after evicting a and d: budget %q remaining %d (found %v), want %d", k.key, got, ok, i+1)
		}
	}
}
