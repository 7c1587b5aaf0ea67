package tokenlimit

import "time"

// Lease is a limit's lease terms, for a layer that leases budgets to
// replicas (package resilient): a replica takes Size of a budget from the
// store at a time, in one atomic reservation, and decides calls from it in
// process for at most TTL (a fixed window's lease ends with its window if
// sooner), then returns what it did not use. The zero value takes no
// leases.
type Lease struct {
	// Size is the cost one lease takes from the budget, 1..the limit's
	// capacity; 0 takes no leases.
	Size int64
	// TTL is how long a lease decides calls: a whole number of
	// milliseconds, 1ms..the limit's Window.
	TTL time.Duration
}

// On reports whether l takes leases.
func (l Lease) On() bool { return l.Size > 0 }

// Leasable reports whether limits of algorithm a can take leases: token
// buckets and GCRA (every admission is then paid by a charge the bucket
// admitted, at most a TTL earlier) and fixed windows (a lease ends with
// its window). A sliding log or counter weighs each charge by its time,
// which a lease, charged before its calls, would misstate.
func (a Algorithm) Leasable() bool {
	return a == TokenBucket || a == GCRA || a == FixedWindow
}

// Validate reports whether limit can take leases on terms l; its error is
// a *FieldError naming "lease", "lease.size" or "lease.ttl" and the
// reason. The zero Lease is valid for every limit.
func (l Lease) Validate(limit Limit) error {
	switch {
	case l == Lease{}:
		return nil
	case !limit.Algorithm.Leasable():
		return fieldErr("lease", "a %s cannot take leases: it weighs each charge by its time, and a lease is charged before its calls; use token_bucket, gcra or fixed_window", limit.Algorithm)
	case l.Size <= 0 || l.Size > limit.Capacity():
		return fieldErr("lease.size", "must be between 1 and the limit's capacity %d, got %d", limit.Capacity(), l.Size)
	case l.TTL < time.Millisecond || l.TTL%time.Millisecond != 0:
		return fieldErr("lease.ttl", "must be a whole number of milliseconds, at least 1ms, got %s", l.TTL)
	case l.TTL > limit.Window():
		return fieldErr("lease.ttl", "must be at most the limit's window %s (a lease would outlive the budget it was taken from), got %s", limit.Window(), l.TTL)
	}
	return nil
}
