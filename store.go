package tokenlimit

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Stores wrap them with context; test with errors.Is.
var (
	// ErrInvalid marks invalid input: a limit, key, cost or adjustment that
	// breaks the rules. Nothing in the store changes. Every *FieldError
	// matches it.
	ErrInvalid = errors.New("invalid input")
	// ErrStoreFull means an in-memory store reached its bound on live keys
	// and refused to create another; existing keys are never evicted.
	ErrStoreFull = errors.New("store is full")
	// ErrUnsupported is errors.ErrUnsupported: the store cannot do what was
	// asked, such as a reservation on a store that is not a Reserver.
	ErrUnsupported = errors.ErrUnsupported
)

// Bounds on one store call.
const (
	// MaxCost is the largest cost or adjustment one item may carry: 2^40.
	MaxCost = MaxQuota
	// MaxItems is the most items one Check (or adjustments one Adjust) may
	// carry. Items must have distinct (key, algorithm) pairs: each pair is
	// one budget.
	MaxItems = 32
)

// Item is one limit to check for a request: which budget (Limit), whose
// budget (Key) and how much of it the request takes (Cost).
type Item struct {
	// Key identifies the budget, such as "user=alice" or "{tenant=acme}:chat".
	// It must be 1..MaxKeyLength bytes. The Redis store takes the Cluster hash
	// tag from it if it has one ("{...}"), and otherwise wraps the whole key
	// in braces, so items that must be checked together on Redis Cluster
	// should share a tag.
	Key string
	// Limit is the budget's definition.
	Limit Limit
	// Cost is what the request takes from the budget, 0..MaxCost. Zero peeks:
	// the result reports the state without charging anything.
	Cost int64
}

// Adjustment changes what an earlier, admitted charge took from a budget:
// it is how reservations are settled.
type Adjustment struct {
	// Key and Limit identify the budget, as in the Item that was charged.
	Key   string
	Limit Limit
	// Delta is added to the charge: negative refunds, positive charges more.
	// |Delta| must be at most MaxCost. An extra charge is taken even if it
	// puts the budget over its limit (the cost was really incurred); a refund
	// never raises the budget above its capacity, and returns cost only to a
	// window that the original charge still counts in.
	Delta int64
	// ChargedAt is the time the original charge was decided at, as reported
	// by Decision.At.
	ChargedAt time.Time
}

// Result is one limit's answer for one item.
//
// For example, with TokenBucketLimit(10, 2, time.Second) and a full bucket, a
// cost of 3 is allowed with Remaining 7 and ResetAfter 1.5s; with 2 tokens
// left, a cost of 3 is denied with Remaining 2 and RetryAfter 500ms.
type Result struct {
	// Allowed reports whether this limit alone admits the item's cost. In a
	// check of several items the request is admitted, and anything charged,
	// only if every item is allowed (Decision.Allowed); when it is not,
	// Remaining and ResetAfter describe the uncharged state for every item.
	Allowed bool
	// Limit is the most cost this limit admits at once (Limit.Capacity).
	Limit int64
	// Remaining is the cost this limit would still admit right now, after
	// this decision's charge if the decision admitted the request. 0..Limit.
	Remaining int64
	// RetryAfter is 0 when allowed. When denied, it is how long until this
	// same cost could be admitted if nothing else is charged meanwhile; it is
	// 0 too when CostExceedsLimit, since waiting cannot help.
	RetryAfter time.Duration
	// ResetAfter is how long until the budget is fully replenished
	// (Remaining == Limit) if nothing else is charged; 0 if it already is.
	ResetAfter time.Duration
	// CostExceedsLimit reports that the cost is above what the limit can ever
	// admit (Cost > Limit): the item is denied and retrying cannot succeed.
	CostExceedsLimit bool
}

// Store decides and records charges against budgets. Implementations are safe
// for concurrent use by multiple goroutines (and, for the Redis store, by
// multiple processes). A call reads and writes the slices (and pointers) it
// is given only until it returns, even when it returns early because its
// context ended: callers reuse them at once (Limiter pools its items).
//
// A store may do more by implementing further interfaces: Reserver
// (reservations; without it a Limiter's Reserve and Settle answer
// ErrUnsupported), Describer and LogReader. Both stores of this module
// implement all three; package storekit holds the checks and arithmetic a
// store's author needs. A wrapper that embeds a Store gets only the methods
// below: to keep reservations it forwards Reserve and Settle itself
// (storekit.Reserve and storekit.Settle).
type Store interface {
	// Check decides items at time now, all or nothing: if every item is
	// allowed, every item's cost is charged; otherwise nothing is charged.
	// It writes one Result per item into results, which must have the same
	// length as items, and returns the time it decided at: now, or the Redis
	// server's clock for a Redis store in server-time mode.
	// Invalid items, or a now outside storekit.ValidateTime's range (field "now",
	// whatever the time mode), return an error matching ErrInvalid and
	// change nothing.
	Check(ctx context.Context, now time.Time, items []Item, results []Result) (time.Time, error)
	// Adjust applies adjustments at time now atomically: all or, on an error,
	// none. Adjustments never deny.
	Adjust(ctx context.Context, now time.Time, adjustments []Adjustment) error
	// Reset forgets key's budget under algorithm alg: it is whole again.
	// Resetting a budget that holds nothing is not an error.
	Reset(ctx context.Context, key string, alg Algorithm) error
}

// StoreInfo is what a store says about itself.
type StoreInfo struct {
	// Name names the kind of store in health answers and logs, such as
	// "memory" or "redis".
	Name string
	// Remote is true for a store reached over the network (Redis): its calls
	// can be slow or fail, so a service bounds each with a timeout, guards
	// them with a circuit breaker and applies its limits' failure modes.
	Remote bool
}

// Describer is implemented by stores that describe themselves; both stores
// of this module do. A store that does not is treated as remote.
type Describer interface {
	// Describe returns the store's StoreInfo; it never changes.
	Describe() StoreInfo
}

// Describe returns what st says about itself, or, for a store that is not
// a Describer, StoreInfo{Name: "custom", Remote: true}: with no word from
// the store, the safe assumption is that its calls can hang or fail.
func Describe(st Store) StoreInfo {
	if d, ok := st.(Describer); ok {
		return d.Describe()
	}
	return StoreInfo{Name: "custom", Remote: true}
}

// LogEntry is one charge a sliding log holds: when it was taken and how
// much (a refund is a negative entry at the time of the charge it refunds).
type LogEntry struct {
	At   time.Time
	Cost int64
}

// LogReader is implemented by stores that can show the entries of a
// sliding log, for inspection; both stores of this module do.
type LogReader interface {
	// LogEntries returns the entries of key's sliding log under limit
	// that are still in its window at now (the Redis server's clock in
	// server-time mode), oldest first (entries of the same time in no
	// particular order). It changes nothing. A key with no log has none.
	LogEntries(ctx context.Context, key string, limit Limit, now time.Time) ([]LogEntry, error)
}
