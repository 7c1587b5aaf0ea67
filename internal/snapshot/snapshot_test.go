package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/snapshot"
	"github.com/tokenlimit/tokenlimit/memstore"
)

var saved = []memstore.Saved{
	{Key: "usd-daily|team=acme|2026-01-30", Algorithm: tokenlimit.FixedWindow, Expires: 1_769_900_000_000_000, State: [3]int64{1_769_813_600_000_000, 4_000_000}},
	{Key: "bucket", Algorithm: tokenlimit.GCRA, Expires: 1_769_900_000_000_001, State: [3]int64{1_769_900_000_000_001, -7, 0}},
}

// TestRoundTrip: what Write writes, Read returns, and the temporary file
// is gone.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), snapshot.FileName)
	for _, want := range [][]memstore.Saved{saved, nil} {
		if err := snapshot.Write(path, want); err != nil {
			t.Fatal(err)
		}
		got, err := snapshot.Read(path)
		if err != nil || !slices.Equal(got, want) && len(want) > 0 {
			t.Fatalf("Read: %+v, %v; want %+v", got, err, want)
		}
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("the directory holds %d files, want the snapshot alone", len(entries))
	}
}

// TestBadFiles: a file cut short, with a byte changed, of a newer format
// or not a snapshot is refused with ErrCorrupt or ErrNewer; Restore logs
// it and leaves the store empty, without a panic.
func TestBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := snapshot.Write(good, saved); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(data)
	flipped[len(flipped)/2] ^= 0x40
	newer := bytes.Clone(data)
	newer[len("TLBUDGET")] = 2
	for _, c := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, snapshot.ErrCorrupt},
		{"cut short", data[:len(data)-9], snapshot.ErrCorrupt},
		{"magic only", data[:12], snapshot.ErrCorrupt},
		{"a byte changed", flipped, snapshot.ErrCorrupt},
		{"newer", newer, snapshot.ErrNewer},
		{"not a snapshot", []byte(`{"budgets": []}`), snapshot.ErrCorrupt},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
		if err := os.WriteFile(path, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := snapshot.Read(path); !errors.Is(err, c.want) {
			t.Errorf("%s: Read error %v, want %v", c.name, err, c.want)
		}
		st, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		snapshot.Restore(st, snapshot.Options{Path: path, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if st.Len() != 0 || !strings.Contains(logs.String(), "budgets snapshot ignored") {
			t.Errorf("%s: Restore left %d keys and logged %q; want none and a line", c.name, st.Len(), logs.String())
		}
	}
}

// TestRunWritesAtStop: Run writes the store's long budgets when its
// context ends, and Restore puts them into a new store.
func TestRunWritesAtStop(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 30, 14, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	path := filepath.Join(t.TempDir(), snapshot.FileName)
	day := tokenlimit.FixedWindowLimit(100, 24*time.Hour)
	check := func(st *memstore.Store, cost int64) int64 {
		t.Helper()
		res := make([]tokenlimit.Result, 1)
		if _, err := st.Check(context.Background(), now, []tokenlimit.Item{{Key: "day", Limit: day, Cost: cost}}, res); err != nil {
			t.Fatal(err)
		}
		return res[0].Remaining
	}
	a, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	check(a, 30)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	snapshot.Run(ctx, a, snapshot.Options{Path: path, Interval: time.Hour, Now: clock})
	b, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snapshot.Restore(b, snapshot.Options{Path: path, Now: clock})
	if r := check(b, 1); r != 69 {
		t.Errorf("restored day: remaining %d, want 69", r)
	}
}
