package storekit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// checkOnly is a store that keeps no reservations: only the methods of
// tokenlimit.Store are promoted from the memstore it wraps.
type checkOnly struct{ tokenlimit.Store }

// TestWrapperReservesExactlyWhenItsStoreDoes: storekit.Reserve and Settle
// pass a call on to a Reserver, and answer ErrUnsupported for a store that
// is not one, charging nothing.
func TestWrapperReservesExactlyWhenItsStoreDoes(t *testing.T) {
	t.Parallel()
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, now := context.Background(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := tokenlimit.FixedWindowLimit(5, time.Minute)
	req := tokenlimit.ReserveRequest{ID: "r", Items: []tokenlimit.Item{{Key: "k", Limit: l, Cost: 2}}, TTL: time.Hour}
	results := make([]tokenlimit.Result, 1)

	if _, err := storekit.Reserve(ctx, checkOnly{ms}, now, req, results); !errors.Is(err, tokenlimit.ErrUnsupported) {
		t.Errorf("Reserve on a store that is not a Reserver: %v, want ErrUnsupported", err)
	}
	if _, err := storekit.Settle(ctx, checkOnly{ms}, now, tokenlimit.SettleRequest{ID: "r", TTL: time.Hour}); !errors.Is(err, tokenlimit.ErrUnsupported) {
		t.Errorf("Settle on a store that is not a Reserver: %v, want ErrUnsupported", err)
	}
	if _, err := ms.Check(ctx, now, []tokenlimit.Item{{Key: "k", Limit: l}}, results); err != nil || results[0].Remaining != 5 {
		t.Fatalf("peek after the unsupported calls: %+v, %v; want 5 left", results[0], err)
	}

	out, err := storekit.Reserve(ctx, ms, now, req, results)
	if err != nil || out.Status != tokenlimit.Reserved || results[0].Remaining != 3 {
		t.Fatalf("Reserve on the memstore: %+v %+v, %v; want reserved with 3 left", out, results[0], err)
	}
	if st, err := storekit.Settle(ctx, ms, now, tokenlimit.SettleRequest{ID: "r", Actual: 1, TTL: time.Hour}); err != nil || st != tokenlimit.Settled {
		t.Errorf("Settle on the memstore: %v, %v; want settled", st, err)
	}
}
