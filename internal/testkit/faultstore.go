package testkit

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// ErrStoreDown is the error of a FaultStore that is Down, as an
// unreachable Redis answers.
var ErrStoreDown = errors.New("connection refused")

// Fault is what a FaultStore does with a call.
type Fault int32

// The faults.
const (
	// Healthy passes every call on.
	Healthy Fault = iota
	// Down fails every call at once with ErrStoreDown.
	Down
	// Hang answers no call until the caller's context ends, then fails
	// with its error.
	Hang
)

// FaultStore is the one store of the tests that fails on demand: it passes
// each call to Store while Healthy, and fails it as Set says otherwise. It
// describes itself as Info, or as Store does when Info is nil: a test that
// wants the service to treat a local store as remote (timeouts, breaker,
// failure modes) sets Info. It is safe for concurrent use; Set may be
// called while calls run.
type FaultStore struct {
	tokenlimit.Store
	Info  *tokenlimit.StoreInfo
	fault atomic.Int32
	// checks, reserves, settles and adjusts count the calls passed on to
	// Store.
	checks, reserves, settles, adjusts atomic.Int64
}

// Remote is a StoreInfo for FaultStore.Info: a Redis store.
var Remote = &tokenlimit.StoreInfo{Name: "redis", Remote: true}

// Set makes the following calls meet f.
func (f *FaultStore) Set(fault Fault) { f.fault.Store(int32(fault)) }

// Checks returns the Check calls passed on to Store so far.
func (f *FaultStore) Checks() int64 { return f.checks.Load() }

// Reserves and Settles return the Reserve and Settle calls passed on to
// Store so far.
func (f *FaultStore) Reserves() int64 { return f.reserves.Load() }

// Settles: see Reserves.
func (f *FaultStore) Settles() int64 { return f.settles.Load() }

// Adjusts returns the Adjust calls passed on to Store so far.
func (f *FaultStore) Adjusts() int64 { return f.adjusts.Load() }

// Describe returns Info, or what Store says.
func (f *FaultStore) Describe() tokenlimit.StoreInfo {
	if f.Info != nil {
		return *f.Info
	}
	return tokenlimit.Describe(f.Store)
}

// fail returns the error of a call under the current fault, nil when it
// is to be passed on.
func (f *FaultStore) fail(ctx context.Context) error {
	switch Fault(f.fault.Load()) {
	case Down:
		return ErrStoreDown
	case Hang:
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// Check passes the call on unless the store is failing.
func (f *FaultStore) Check(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	if err := f.fail(ctx); err != nil {
		return time.Time{}, err
	}
	f.checks.Add(1)
	return f.Store.Check(ctx, now, items, results)
}

// Adjust passes the call on unless the store is failing.
func (f *FaultStore) Adjust(ctx context.Context, now time.Time, adjs []tokenlimit.Adjustment) error {
	if err := f.fail(ctx); err != nil {
		return err
	}
	f.adjusts.Add(1)
	return f.Store.Adjust(ctx, now, adjs)
}

// Reset passes the call on unless the store is failing.
func (f *FaultStore) Reset(ctx context.Context, key string, alg tokenlimit.Algorithm) error {
	if err := f.fail(ctx); err != nil {
		return err
	}
	return f.Store.Reset(ctx, key, alg)
}

// Reserve passes the call on unless the store is failing.
func (f *FaultStore) Reserve(ctx context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	if err := f.fail(ctx); err != nil {
		return tokenlimit.ReserveOutcome{}, err
	}
	f.reserves.Add(1)
	return storekit.Reserve(ctx, f.Store, now, req, results)
}

// Settle passes the call on unless the store is failing.
func (f *FaultStore) Settle(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	if err := f.fail(ctx); err != nil {
		return 0, err
	}
	f.settles.Add(1)
	return storekit.Settle(ctx, f.Store, now, req)
}
