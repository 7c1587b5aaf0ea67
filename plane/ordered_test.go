package plane

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// TestOrderedIsASortedSet: after random puts and removes (enough to split
// and drop chunks), walking from any id gives what a sorted slice gives.
func TestOrderedIsASortedSet(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	o := ordered[string]{id: func(s string) string { return s }}
	model := map[string]bool{}
	for range 20_000 {
		id := strconv.Itoa(rng.IntN(5000))
		if rng.IntN(3) == 0 {
			o.remove(id)
			delete(model, id)
		} else {
			o.put(id)
			model[id] = true
		}
	}
	want := make([]string, 0, len(model))
	for id := range model {
		want = append(want, id)
	}
	slices.Sort(want)
	for _, after := range []string{"", "0", "2500", "4999", "5", "9999", want[len(want)/2]} {
		var got []string
		o.ascend(after, func(s string) bool { got = append(got, s); return true })
		i, _ := slices.BinarySearch(want, after)
		if i < len(want) && want[i] == after {
			i++
		}
		if !slices.Equal(got, want[i:]) {
			t.Fatalf("after %q: got %d ids, want %d (%v…, want %v…)", after, len(got), len(want)-i, got[:min(3, len(got))], want[i:min(i+3, len(want))])
		}
	}
	for _, ch := range o.chunks {
		if len(ch) == 0 || len(ch) > maxChunk {
			t.Fatalf("a chunk of %d values, want 1-%d", len(ch), maxChunk)
		}
	}
}

// TestListKeysPagesEveryKeyOnceWhileKeysChange: paging with and without
// filters returns every key that exists throughout exactly once, never a
// key after its deletion, and only keys the filter selects, while keys are
// created, deleted and moved between teams between pages.
func TestListKeysPagesEveryKeyOnceWhileKeysChange(t *testing.T) {
	t.Parallel()
	no, yes := false, true
	for _, f := range []Filter{{}, {Team: "t1"}, {Plan: "pro"}, {LabelName: "env", LabelValue: "prod"}, {Disabled: &yes}, {Team: "t2", Disabled: &no}} {
		t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
			t.Parallel()
			now := t0
			p := openPlane(t, NewMemoryStore(), &now)
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(3, 4))
			for _, team := range []string{"t0", "t1", "t2"} {
				if _, err := p.CreateTeam(ctx, Spec{Name: team}); err != nil {
					t.Fatal(err)
				}
			}
			randomSpec := func(i int) Spec {
				return Spec{Name: "k" + strconv.Itoa(i), Team: "t" + strconv.Itoa(rng.IntN(3)), Plan: []string{"", "pro", "free"}[rng.IntN(3)],
					Labels: map[string]string{"env": []string{"prod", "dev"}[rng.IntN(2)]}, Disabled: rng.IntN(4) == 0}
			}
			// stable: never changed; churn: created, deleted or moved
			// between pages.
			stable := map[string]bool{}
			var churn []string
			for i := range 1200 {
				k, _, err := p.CreateKey(ctx, randomSpec(i))
				if err != nil {
					t.Fatal(err)
				}
				if i%2 == 0 && f.matches(k) {
					stable[k.ID] = true
				} else if i%2 == 1 {
					churn = append(churn, k.ID)
				}
			}
			seen := map[string]int{}
			deleted := map[string]bool{}
			after, pages := "", 0
			for {
				keys, next := p.ListKeys(f, after, 37)
				pages++
				for i, k := range keys {
					seen[k.ID]++
					switch {
					case !f.matches(k):
						t.Fatalf("page %d: key %+v does not match the filter", pages, k)
					case deleted[k.ID]:
						t.Fatalf("page %d: key %s listed after its deletion", pages, k.ID)
					case k.ID <= after || (i > 0 && k.ID <= keys[i-1].ID):
						t.Fatalf("page %d: %s out of order after %q", pages, k.ID, after)
					}
				}
				if next == "" {
					break
				}
				if next != keys[len(keys)-1].ID {
					t.Fatalf("next %q, want the page's last id %q", next, keys[len(keys)-1].ID)
				}
				after = next
				for range 5 { // change keys on both sides of the cursor
					id := churn[rng.IntN(len(churn))]
					switch rng.IntN(3) {
					case 0:
						if err := p.DeleteKey(ctx, id, AnyVersion); err == nil {
							deleted[id] = true
						}
					case 1:
						if _, ok := p.Key(id); ok {
							if _, err := p.UpdateKey(ctx, id, randomSpec(rng.IntN(1000)), AnyVersion); err != nil {
								t.Fatal(err)
							}
						}
					default:
						if _, _, err := p.CreateKey(ctx, randomSpec(rng.IntN(1000))); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			for id, n := range seen {
				if n != 1 {
					t.Errorf("key %s listed %d times", id, n)
				}
			}
			for id := range stable {
				if seen[id] != 1 {
					t.Errorf("stable key %s listed %d times, want once", id, seen[id])
				}
			}
			if len(stable) == 0 || pages < 3 {
				t.Fatalf("%d stable keys over %d pages: the test exercises nothing", len(stable), pages)
			}
		})
	}
}

// TestTeamIndexFollowsMovesAndDeletes: a key moved to another team is
// listed under the new team only, and a team whose keys all left or were
// deleted can be deleted.
func TestTeamIndexFollowsMovesAndDeletes(t *testing.T) {
	t.Parallel()
	now := t0
	p := openPlane(t, NewMemoryStore(), &now)
	ctx := context.Background()
	for _, team := range []string{"a", "b"} {
		if _, err := p.CreateTeam(ctx, Spec{Name: team}); err != nil {
			t.Fatal(err)
		}
	}
	k1, _, err := p.CreateKey(ctx, Spec{Name: "one", Team: "a"})
	if err != nil {
		t.Fatal(err)
	}
	k2, _, err := p.CreateKey(ctx, Spec{Name: "two", Team: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpdateKey(ctx, k1.ID, Spec{Name: "one", Team: "b"}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	if keys, _ := p.ListKeys(Filter{Team: "b"}, "", 10); len(keys) != 1 || keys[0].ID != k1.ID {
		t.Errorf("team b lists %v, want only %s", keys, k1.ID)
	}
	if keys, _ := p.ListKeys(Filter{Team: "a"}, "", 10); len(keys) != 1 || keys[0].ID != k2.ID {
		t.Errorf("team a lists %v, want only %s", keys, k2.ID)
	}
	if err := p.DeleteTeam(ctx, "a", AnyVersion); err != ErrInUse {
		t.Errorf("deleting team a with a key: %v, want ErrInUse", err)
	}
	if err := p.DeleteKey(ctx, k2.ID, AnyVersion); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteTeam(ctx, "a", AnyVersion); err != nil {
		t.Errorf("deleting team a without keys: %v", err)
	}
	if teams, _ := p.ListTeams("", 10); len(teams) != 1 || teams[0].ID != "b" {
		t.Errorf("teams %v, want only b", teams)
	}
}

// BenchmarkListKeysPage is one page of 100 keys from the middle of 100,000
// keys (10 teams, 3 plans, a label of 2 values, 1 in 8 disabled), without
// a filter and with each filter.
func BenchmarkListKeysPage(b *testing.B) {
	const n = 100_000
	p, err := Open(context.Background(), NewMemoryStore(), Options{KnownPlan: func(string) bool { return true }})
	if err != nil {
		b.Fatal(err)
	}
	recs := make([]Record, 0, n+10)
	for i := range 10 {
		recs = append(recs, Record{Kind: KindTeam, ID: "team" + strconv.Itoa(i), Version: int64(i + 1), Data: encodeTeam(&Team{ID: "team" + strconv.Itoa(i), Common: Common{Name: "team" + strconv.Itoa(i)}})})
	}
	for i := range n {
		k := &Key{ID: fmt.Sprintf("key_%08x%016x", rand.Uint32(), rand.Uint64()), Team: "team" + strconv.Itoa(i%10), Digest: Digest(strconv.Itoa(i)),
			Common: Common{Name: "k", Plan: []string{"free", "pro", "max"}[i%3], Labels: map[string]string{"env": []string{"prod", "dev"}[i%2]}, Disabled: i%8 == 0}}
		recs = append(recs, Record{Kind: KindKey, ID: k.ID, Version: int64(len(recs) + 1), Data: encodeKey(k)})
	}
	p.apply(recs, true)
	middle := "key_8" // about the middle of random ids
	yes := true
	for _, c := range []struct {
		name string
		f    Filter
	}{{"all", Filter{}}, {"team", Filter{Team: "team3"}}, {"plan", Filter{Plan: "pro"}}, {"label", Filter{LabelName: "env", LabelValue: "prod"}}, {"disabled", Filter{Disabled: &yes}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if keys, _ := p.ListKeys(c.f, middle, 100); len(keys) != 100 {
					b.Fatalf("%d keys, want 100", len(keys))
				}
			}
		})
	}
}
