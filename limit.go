// Package tokenlimit is the user API and vocabulary of the tokenlimit rate
// limiter: limits, the items a request is checked against, the results of a
// decision, the Limiter that holds the clock, its reservations, and the Store
// interface that the in-memory and Redis stores implement. The checks and
// arithmetic a store's author needs are in package storekit.
//
// Deciding answers a Result (Allow, AllowN: one key) or a Decision, all or
// nothing over any number of items and with the time the store decided at
// (Check, and a Reservation's Decision). A
// reservation is settled through its handle (Reservation.Settle, Cancel) or
// by id from any client of the store (Limiter.Settle).
//
// Every request carries a cost (1 for a plain request, a weight such as
// chat=1 / embed=3, or the LLM tokens it really used); a Limit is a budget of
// that cost. Being over a limit is a Result, never an error: errors mean the
// input was invalid or the store failed.
package tokenlimit

import (
	"fmt"
	"strings"
	"time"
)

// Algorithm names one of the five rate-limiting algorithms. The zero value is
// not a valid algorithm.
type Algorithm uint8

// The algorithms. Each accepts weighted costs; docs/algorithms.md explains
// them with worked examples and the memory each needs per key.
const (
	// FixedWindow admits Quota cost per Period-long window aligned to the Unix
	// epoch. Cheap and exact within a window, but up to 2×Quota can pass
	// around a window boundary.
	FixedWindow Algorithm = iota + 1
	// SlidingLog remembers every admitted request with its cost and admits
	// at most Quota cost in any Period-long interval. Exact; memory grows with
	// the number of requests in a window (capped at MaxLogEntries).
	SlidingLog
	// SlidingCounter approximates a sliding window from the counts of the
	// current and previous fixed windows, weighting the previous one by how
	// much of it still overlaps the sliding window. O(1) memory; never admits
	// more than the exact sliding log would have if traffic in the previous
	// window was evenly spread.
	SlidingCounter
	// TokenBucket holds up to Burst tokens and refills Quota tokens per
	// Period; a request takes cost tokens. Implemented exactly, as virtual
	// scheduling (a theoretical arrival time), with no rounding drift.
	TokenBucket
	// GCRA is the generic cell rate algorithm with the semantics of
	// redis-cell's CL.THROTTLE key max_burst count period [quantity]:
	// Burst is max_burst+1 and Quota per Period is count per period.
	GCRA
)

var algorithmNames = [...]string{
	FixedWindow:    "fixed_window",
	SlidingLog:     "sliding_log",
	SlidingCounter: "sliding_counter",
	TokenBucket:    "token_bucket",
	GCRA:           "gcra",
}

// String returns the algorithm's name as used in configuration files, such
// as "token_bucket", or "Algorithm(N)" for an invalid value.
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Valid reports whether a is one of the five algorithms.
func (a Algorithm) Valid() bool {
	return a >= FixedWindow && a <= GCRA
}

// MarshalText returns the algorithm's name, so that JSON and YAML carry
// "token_bucket", not a number. An invalid algorithm is an error.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, fmt.Errorf("tokenlimit: marshal %s: not an algorithm", a)
	}
	return []byte(algorithmNames[a]), nil
}

// UnmarshalText sets a to the algorithm named by text, as ParseAlgorithm.
func (a *Algorithm) UnmarshalText(text []byte) error {
	v, err := ParseAlgorithm(string(text))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// ParseAlgorithm returns the algorithm named s (see Algorithm.String). The
// match ignores case and accepts '-' for '_'.
func ParseAlgorithm(s string) (Algorithm, error) {
	name := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	for a := FixedWindow; a <= GCRA; a++ {
		if algorithmNames[a] == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("tokenlimit: unknown algorithm %q (want one of %s)", s, strings.Join(algorithmNames[1:], ", "))
}

// Limit is a budget of cost. The zero value is invalid; build one with the
// constructors below or fill the fields and call Validate.
type Limit struct {
	// Algorithm chooses how the budget is enforced.
	Algorithm Algorithm
	// Quota is the cost admitted per Period: the window's limit for the
	// window algorithms, the refill rate for TokenBucket and GCRA.
	Quota int64
	// Period is the window length, or the time in which Quota tokens refill.
	// It must be a whole number of milliseconds between 1 ms and MaxPeriod.
	Period time.Duration
	// Burst is the most cost a TokenBucket or GCRA can admit at once (the
	// bucket's capacity; redis-cell's max_burst+1). Zero means Quota. The
	// window algorithms ignore it and must leave it zero.
	Burst int64
	// Offset shifts the windows of a FixedWindow or SlidingCounter: they
	// start at Offset + k×Period in Unix time, so a 24h window with an 8h
	// offset runs from 08:00 to 08:00 UTC. Zero aligns windows to the Unix
	// epoch. 0 <= Offset < Period, in whole milliseconds; other algorithms
	// must leave it zero.
	Offset time.Duration
}

// Bounds on a Limit. They keep every computation exact in 53 bits, the range
// in which Lua numbers (float64) hold integers exactly.
const (
	// MaxPeriod is the longest window or refill period: 366 days.
	MaxPeriod = 366 * 24 * time.Hour
	// MaxSlidingCounterPeriod is the longest window of a SlidingCounter:
	// 100 days. Its weight arithmetic needs the window in milliseconds
	// times one million to fit in 53 bits.
	MaxSlidingCounterPeriod = 100 * 24 * time.Hour
	// MaxQuota is the largest Quota or Burst: 2^40, about 1.1e12.
	MaxQuota = 1 << 40
	// MaxSlidingCounterQuota is the largest Quota of a SlidingCounter:
	// 2^33, about 8.6e9; its weighted estimate multiplies counts by 10^6.
	MaxSlidingCounterQuota = 1 << 33
	// MaxLogEntries caps the entries of one SlidingLog key, so a script
	// never walks an unbounded list: a sliding log admits at most this many
	// requests per window whatever their cost.
	MaxLogEntries = 1_000
	// MaxKeyLength is the longest key a store accepts, in bytes.
	MaxKeyLength = 1024
)

// maxBucketSpan is storekit.MaxBucketSpan, the bound on a bucket's capacity
// × num (see Interval) that keeps a store's arithmetic exact; storekit's
// tests hold Validate to it.
const maxBucketSpan = 1 << 51

// FixedWindowLimit admits limit cost per window, counted in windows aligned
// to the Unix epoch.
func FixedWindowLimit(limit int64, window time.Duration) Limit {
	return Limit{Algorithm: FixedWindow, Quota: limit, Period: window}
}

// SlidingLogLimit admits at most limit cost in any interval of length window.
func SlidingLogLimit(limit int64, window time.Duration) Limit {
	return Limit{Algorithm: SlidingLog, Quota: limit, Period: window}
}

// SlidingCounterLimit admits about limit cost per sliding window, using the
// two-window approximation.
func SlidingCounterLimit(limit int64, window time.Duration) Limit {
	return Limit{Algorithm: SlidingCounter, Quota: limit, Period: window}
}

// TokenBucketLimit is a bucket of capacity tokens that refills refill tokens
// every per; for example TokenBucketLimit(10, 2, time.Second).
func TokenBucketLimit(capacity, refill int64, per time.Duration) Limit {
	return Limit{Algorithm: TokenBucket, Quota: refill, Period: per, Burst: capacity}
}

// GCRALimit has the semantics of redis-cell's CL.THROTTLE key max_burst count
// period: count per period on average, and bursts of max_burst+1. For example
// GCRALimit(10, 5, time.Minute) is "CL.THROTTLE key 10 5 60".
func GCRALimit(maxBurst, count int64, period time.Duration) Limit {
	return Limit{Algorithm: GCRA, Quota: count, Period: period, Burst: maxBurst + 1}
}

// Capacity is the most cost the limit can admit at once, reported as
// Result.Limit: Quota for the window algorithms, Burst (or Quota when Burst is
// zero) for TokenBucket and GCRA.
func (l Limit) Capacity() int64 {
	if l.bucketed() && l.Burst != 0 {
		return l.Burst
	}
	return l.Quota
}

// Window is how long the limit takes to go from empty to full: the period
// of a window algorithm; for a TokenBucket or GCRA the time an empty bucket
// takes to refill its whole capacity (capacity 10 refilling 2 per second:
// 5s), rounded down to the microsecond. It is the window in which the
// limit grants Capacity, as the IETF RateLimit-Policy field and Envoy's
// rate limit service describe a limit.
func (l Limit) Window() time.Duration {
	if !l.bucketed() {
		return l.Period
	}
	num, den := l.Interval() // microseconds per unit of cost
	return time.Duration(l.Capacity()*num/den) * time.Microsecond
}

func (l Limit) bucketed() bool {
	return l.Algorithm == TokenBucket || l.Algorithm == GCRA
}

// String describes the limit, such as "token_bucket 2/1s burst 10".
func (l Limit) String() string {
	if l.bucketed() {
		return fmt.Sprintf("%s %d/%s burst %d", l.Algorithm, l.Quota, l.Period, l.Capacity())
	}
	return fmt.Sprintf("%s %d/%s", l.Algorithm, l.Quota, l.Period)
}

// Validate reports whether the limit can be enforced exactly. Its error is a
// *FieldError naming the offending field and the reason.
func (l Limit) Validate() error {
	switch {
	case !l.Algorithm.Valid():
		return fieldErr("algorithm", "unknown algorithm %d (want one of %s)", l.Algorithm, strings.Join(algorithmNames[1:], ", "))
	case l.Quota <= 0:
		return fieldErr("quota", "must be positive, got %d", l.Quota)
	case l.Quota > MaxQuota:
		return fieldErr("quota", "must be at most %d, got %d", int64(MaxQuota), l.Quota)
	case l.Period < time.Millisecond:
		return fieldErr("period", "must be at least 1ms, got %s", l.Period)
	case l.Period > MaxPeriod:
		return fieldErr("period", "must be at most %s, got %s", MaxPeriod, l.Period)
	case l.Period%time.Millisecond != 0:
		return fieldErr("period", "must be a whole number of milliseconds, got %s", l.Period)
	case l.Algorithm == SlidingCounter && l.Quota > MaxSlidingCounterQuota:
		return fieldErr("quota", "a sliding counter's quota must be at most %d, got %d", int64(MaxSlidingCounterQuota), l.Quota)
	case l.Algorithm == SlidingCounter && l.Period > MaxSlidingCounterPeriod:
		return fieldErr("period", "a sliding counter's window must be at most %s, got %s", MaxSlidingCounterPeriod, l.Period)
	}
	if l.Offset != 0 {
		switch {
		case l.Algorithm != FixedWindow && l.Algorithm != SlidingCounter:
			return fieldErr("offset", "only fixed_window and sliding_counter windows can be offset, not %s", l.Algorithm)
		case l.Offset < 0 || l.Offset >= l.Period:
			return fieldErr("offset", "must be in [0, period), got %s for period %s", l.Offset, l.Period)
		case l.Offset%time.Millisecond != 0:
			return fieldErr("offset", "must be a whole number of milliseconds, got %s", l.Offset)
		}
	}
	if !l.bucketed() {
		if l.Burst != 0 {
			return fieldErr("burst", "only token_bucket and gcra have a burst; %s counts quota per period", l.Algorithm)
		}
		return nil
	}
	return l.validateBucket()
}

func (l Limit) validateBucket() error {
	if l.Burst < 0 || l.Burst > MaxQuota {
		return fieldErr("burst", "must be between 0 (meaning quota) and %d, got %d", int64(MaxQuota), l.Burst)
	}
	if l.Capacity() <= maxBucketSpan/l.Period.Microseconds() {
		return nil // num <= the period in µs: no need for the exact fraction
	}
	num, _ := l.Interval()
	if l.Capacity() > maxBucketSpan/num {
		return fieldErr("burst", "burst %d with %d per %s needs more than 53 bits of precision; lower the burst or use a rate that divides the period evenly", l.Capacity(), l.Quota, l.Period)
	}
	return nil
}

// Interval returns the time one unit of cost takes to refill in a TokenBucket
// or GCRA, as the reduced fraction num/den microseconds. For 2 per second it
// is 500000/1; for 3 per second 1000000/3.
func (l Limit) Interval() (num, den int64) {
	period := l.Period.Microseconds()
	g := gcd(period, l.Quota)
	return period / g, l.Quota / g
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// FieldError reports an invalid field of an input: a limit, an item, a
// configuration entry. Field names the field as written in configuration
// files and APIs, such as "quota" or "cost".
type FieldError struct {
	Field  string
	Reason string
}

// Error returns "<field>: <reason>".
func (e *FieldError) Error() string {
	return e.Field + ": " + e.Reason
}

// Is makes errors.Is(err, ErrInvalid) true for every *FieldError.
func (e *FieldError) Is(target error) bool {
	return target == ErrInvalid
}

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
