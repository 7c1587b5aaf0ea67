package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// TestExportImport: a store's budgets that live at least minLife more,
// exported and imported into a new store, decide there as they did in
// the first (a day's window keeps its count, a bucket its level); short
// budgets and sliding logs are left out, and max bounds the export.
func TestExportImport(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 15, 10, 0, 0, 0, time.UTC)
	day := tokenlimit.FixedWindowLimit(100, 24*time.Hour)
	bucket := tokenlimit.TokenBucketLimit(100, 1, time.Hour)
	minute := tokenlimit.FixedWindowLimit(100, time.Minute)
	log := tokenlimit.SlidingLogLimit(100, 24*time.Hour)
	charge := func(st *memstore.Store, key string, l tokenlimit.Limit, cost int64) tokenlimit.Result {
		t.Helper()
		res := make([]tokenlimit.Result, 1)
		if _, err := st.Check(context.Background(), now, []tokenlimit.Item{{Key: key, Limit: l, Cost: cost}}, res); err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	a := newStore(t, memstore.Options{})
	charge(a, "day", day, 30)
	charge(a, "bucket", bucket, 40)
	charge(a, "minute", minute, 50)
	charge(a, "log", log, 60)
	saved, dropped := a.Export(now, time.Minute, 10)
	if len(saved) != 2 || dropped != 0 {
		t.Fatalf("exported %+v (%d dropped), want the day and the bucket", saved, dropped)
	}
	if one, dropped := a.Export(now, time.Minute, 1); len(one) != 1 || dropped != 1 {
		t.Errorf("export of at most 1: %d, %d dropped; want 1, 1", len(one), dropped)
	}
	b := newStore(t, memstore.Options{})
	charge(b, "bucket", bucket, 1) // live in b: kept over the saved copy
	if n, err := b.Import(now, saved); err != nil || n != 1 {
		t.Fatalf("Import: %d, %v; want 1 budget put back", n, err)
	}
	if r := charge(b, "day", day, 1); r.Remaining != 69 {
		t.Errorf("day after import: remaining %d, want 69", r.Remaining)
	}
	if r := charge(b, "bucket", bucket, 1); r.Remaining != 98 {
		t.Errorf("bucket live before import: remaining %d, want 98", r.Remaining)
	}
	if r := charge(b, "minute", minute, 1); r.Remaining != 99 {
		t.Errorf("minute window (not exported): remaining %d, want 99", r.Remaining)
	}
	// Imported after both refilled: nothing comes back.
	c := newStore(t, memstore.Options{})
	if n, err := c.Import(now.Add(50*time.Hour), saved); err != nil || n != 0 {
		t.Errorf("Import 50 h later: %d, %v; want 0", n, err)
	}
	if _, err := c.Import(now, []memstore.Saved{{Key: "", Algorithm: tokenlimit.FixedWindow, Expires: now.Add(time.Hour).UnixMicro()}}); err == nil {
		t.Error("Import of an empty key: no error")
	}
}

// BenchmarkExport: one Export of 100,000 day budgets; a check waits at
// most for one shard's share of it (1/64 with the default shards).
func BenchmarkExport(b *testing.B) {
	now := time.Date(2026, 1, 15, 10, 0, 0, 0, time.UTC)
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	day := tokenlimit.FixedWindowLimit(100, 24*time.Hour)
	res := make([]tokenlimit.Result, 1)
	for i := range 100_000 {
		if _, err := st.Check(context.Background(), now, []tokenlimit.Item{{Key: fmt.Sprintf("daily|user=%d|2026-01-15", i), Limit: day, Cost: 1}}, res); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		if saved, _ := st.Export(now, time.Minute, 200_000); len(saved) != 100_000 {
			b.Fatalf("exported %d", len(saved))
		}
	}
}
