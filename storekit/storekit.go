// Package storekit is for authors of a tokenlimit.Store: the checks a store
// runs on its input before it touches any state, the arithmetic every store
// must share for reservations (a request's digest, what a settled item
// costs, the adjustment a settlement applies), and the bounds that keep a
// store's integers exact. A program that only decides requests needs none of
// it: package tokenlimit is its API. The in-memory and Redis stores use it,
// and storetest checks that a store behaves as these helpers promise.
package storekit

import "github.com/tokenlimit/tokenlimit"

// Bounds that keep every computation of a store exact in 53 bits, the range
// in which Lua numbers (float64) hold integers exactly. tokenlimit.Limit's
// Validate keeps every valid limit within them.
const (
	// MaxExact is the largest integer every computation may reach: 2^53.
	MaxExact = 1 << 53
	// MaxBucketSpan bounds a TokenBucket or GCRA: capacity × num (see
	// Limit.Interval), the time a bucket takes to fill in 1/den µs, must be
	// at most 2^51, and so must |delta| × num of an adjustment. With the
	// current time (about 2^51 µs since 1970) every intermediate value then
	// stays below 2^53 in Lua.
	MaxBucketSpan = 1 << 51
)

// bucketed reports whether l refills continuously (a TokenBucket or GCRA),
// the algorithms whose adjustments MaxBucketSpan bounds.
func bucketed(l tokenlimit.Limit) bool {
	return l.Algorithm == tokenlimit.TokenBucket || l.Algorithm == tokenlimit.GCRA
}
