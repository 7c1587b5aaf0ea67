package storekit

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// Reserve is st's Reserve when st is a tokenlimit.Reserver, and otherwise an
// error matching tokenlimit.ErrUnsupported: for a store that wraps another
// (a tracer, a fault layer) and keeps reservations exactly when the store it
// wraps does.
func Reserve(ctx context.Context, st tokenlimit.Store, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	rs, err := reserver(st)
	if err != nil {
		return tokenlimit.ReserveOutcome{}, err
	}
	return rs.Reserve(ctx, now, req, results)
}

// Settle is st's Settle when st is a tokenlimit.Reserver, like Reserve.
func Settle(ctx context.Context, st tokenlimit.Store, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	rs, err := reserver(st)
	if err != nil {
		return 0, err
	}
	return rs.Settle(ctx, now, req)
}

func reserver(st tokenlimit.Store) (tokenlimit.Reserver, error) {
	if rs, ok := st.(tokenlimit.Reserver); ok {
		return rs, nil
	}
	return nil, fmt.Errorf("store %q keeps no reservations (it is not a tokenlimit.Reserver): %w", tokenlimit.Describe(st).Name, tokenlimit.ErrUnsupported)
}
