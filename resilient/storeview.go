package resilient

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// A Failover is also a tokenlimit.Store and a tokenlimit.Reserver, so that
// a tokenlimit.Limiter gets the whole fault layer: every item is decided
// under FailoverOptions.Policy (the zero value fails closed), at the
// layer's Clock (the now these methods are given is ignored: give the
// Limiter the same clock). A decision the store could not make answers an
// error matching ErrUnavailable; a full store one matching
// tokenlimit.ErrStoreFull.
var (
	_ tokenlimit.Store    = (*Failover)(nil)
	_ tokenlimit.Reserver = (*Failover)(nil)
)

// fewPolicies is how many items a call of the Store methods takes its
// policies for without allocating.
const fewPolicies = 4

// policies returns n copies of the layer's policy, in buf when it is long
// enough.
func (f *Failover) policies(buf *[fewPolicies]Policy, n int) []Policy {
	ps := buf[:0]
	if n > len(buf) {
		ps = make([]Policy, 0, n)
	}
	for range n {
		ps = append(ps, f.policy)
	}
	return ps
}

// storeError is the error of a Store method for answer a: nil for an
// answer of the store or of the local budgets.
func storeError(a Answer) error {
	switch {
	case a.Full:
		return fmt.Errorf("resilient: no room for a new key: %w", tokenlimit.ErrStoreFull)
	case a.Source == Unavailable:
		return fmt.Errorf("resilient: the store failed and the policy fails closed: %w", ErrUnavailable)
	}
	return nil
}

// Check implements tokenlimit.Store with Decide. A request held on the
// local budgets of a recovery (HeldLocal) is denied: the results of its
// other items are left zero.
func (f *Failover) Check(ctx context.Context, _ time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	var buf [fewPolicies]Policy
	a, err := f.Decide(ctx, items, f.policies(&buf, len(items)), results)
	if err == nil {
		err = storeError(a)
	}
	return a.At, err
}

// Adjust implements tokenlimit.Store: the store's Adjust through the
// deadline and breaker.
func (f *Failover) Adjust(ctx context.Context, now time.Time, adjustments []tokenlimit.Adjustment) error {
	return f.guard.Adjust(ctx, now, adjustments)
}

// Reset implements tokenlimit.Store: the store's Reset through the
// deadline and breaker.
func (f *Failover) Reset(ctx context.Context, key string, alg tokenlimit.Algorithm) error {
	return f.guard.Reset(ctx, key, alg)
}

// Reserve implements tokenlimit.Reserver with DecideReservation. A
// request held on the local budgets of a recovery is Denied.
func (f *Failover) Reserve(ctx context.Context, _ time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	var buf [fewPolicies]Policy
	res, a, err := f.DecideReservation(ctx, req, f.policies(&buf, len(req.Items)), results)
	if err == nil {
		err = storeError(a)
	}
	switch {
	case err != nil:
		return tokenlimit.ReserveOutcome{}, err
	case res == nil:
		return tokenlimit.ReserveOutcome{Status: tokenlimit.Denied, At: a.At}, nil
	}
	return tokenlimit.ReserveOutcome{Status: res.Status(), At: a.At}, nil // a.At is the reservation's
}

// Describe says what the wrapped store says of itself.
func (f *Failover) Describe() tokenlimit.StoreInfo { return f.info }
