package tokenlimit

import (
	"context"
	"strconv"
	"time"
)

// MaxIDLength is the longest reservation id a store accepts, in bytes.
const MaxIDLength = 128

// SettleRule says what a reserved item costs once the request's real cost
// is known. The zero value is SettleActual.
type SettleRule uint8

// The rules.
const (
	// SettleActual: the item costs the request's actual cost (a token
	// budget charged an estimate).
	SettleActual SettleRule = iota
	// SettleKeep: the item keeps what it was charged (a per-request cost).
	SettleKeep
	// SettleRelease: the item costs nothing once settled (a slot of a
	// concurrency limit, given back when the request ends).
	SettleRelease
	// SettleSpend: the item costs the request's spend (a second measure
	// of it, such as its price in micro-dollars), or keeps its charge when
	// the settlement gives no spend.
	SettleSpend
	// SettleMeasure is the first of MaxMeasures rules (see MeasureRule):
	// under SettleMeasure+k the item costs the settlement's Measures[k]
	// (one more measure of the request, such as its output tokens), or
	// keeps its charge when the settlement gives fewer measures.
	SettleMeasure
)

// MaxMeasures is how many measures a settlement may carry (see
// SettleRequest.Measures).
const MaxMeasures = 16

// MeasureRule returns the rule that settles an item to measure k,
// 0 <= k < MaxMeasures.
func MeasureRule(k int) SettleRule { return SettleMeasure + SettleRule(k) }

// ReserveRequest is a reservation to record in a store: an all-or-nothing
// check of Items whose charges are kept under ID until they are settled.
type ReserveRequest struct {
	// ID names the reservation, 1..MaxIDLength bytes. The same ID with the
	// same request (same items, costs and rules) replays the first answer
	// and charges nothing; with a different request it is a Conflict.
	ID string
	// Items are checked and charged as in Store.Check.
	Items []Item
	// Rules holds one SettleRule per item, or is empty for SettleActual on
	// every item.
	Rules []SettleRule
	// TTL is how long the record is kept, 1ms..MaxPeriod: until then the
	// reservation can be settled, and a retry of it replays; after it an
	// unsettled estimate simply stands.
	TTL time.Duration
	// Notes holds one note per item ("" for none), or is empty for none:
	// at most MaxNoteLength bytes each, kept with the record and given
	// back, with the item's result, to the settlement that applies it
	// (SettleRequest.Noted), whichever client makes it. They are the
	// caller's own bookkeeping (the service notes what raising a budget's
	// alerts needs) and no part of the request: a retry with other notes
	// replays, keeping the first ones.
	Notes []string
}

// MaxNoteLength is the longest note an item of a reservation may carry
// (ReserveRequest.Notes), in bytes.
const MaxNoteLength = 2048

// Noted is an item of a reservation that was reserved with a note, as the
// settlement that applied the reservation found it.
type Noted struct {
	// Note is the item's ReserveRequest.Notes entry.
	Note string
	// Result is what the reserve answered for the item: its budget as the
	// reservation's charge left it (Limit included).
	Result Result
}

func validateID(id string) error {
	switch {
	case id == "":
		return fieldErr("id", "must not be empty")
	case len(id) > MaxIDLength:
		return fieldErr("id", "must be at most %d bytes, got %d", MaxIDLength, len(id))
	}
	return nil
}

func validateTTL(ttl time.Duration) error {
	if ttl < time.Millisecond || ttl > MaxPeriod {
		return fieldErr("ttl", "must be between 1ms and %s, got %s", MaxPeriod, ttl)
	}
	return nil
}

// ReserveStatus is what a store did with a ReserveRequest.
type ReserveStatus uint8

// The statuses.
const (
	// Reserved: every item admitted the request; its costs are charged and
	// recorded under the id.
	Reserved ReserveStatus = iota + 1
	// Denied: some item denied; nothing is charged and nothing recorded, so
	// the id may be tried again.
	Denied
	// Replayed: the id holds a reservation of this same request (a retry,
	// perhaps after a lost reply): the results and time are the recorded
	// ones, and nothing more is charged.
	Replayed
	// Conflict: the id holds a reservation of a different request. Nothing
	// is charged and the first reservation is untouched.
	Conflict
	// Closed: the id was settled before this reserve reached the store (a
	// reserve that arrived late): nothing is charged.
	Closed
)

// String returns "reserved", "denied", "replayed", "conflict" or "closed".
func (s ReserveStatus) String() string {
	switch s {
	case Reserved:
		return "reserved"
	case Denied:
		return "denied"
	case Replayed:
		return "replayed"
	case Conflict:
		return "conflict"
	case Closed:
		return "closed"
	}
	return "ReserveStatus(" + strconv.Itoa(int(s)) + ")"
}

// Admitted reports whether the reservation holds a charge: Reserved or
// Replayed.
func (s ReserveStatus) Admitted() bool { return s == Reserved || s == Replayed }

// ReserveOutcome is a store's answer to a ReserveRequest.
type ReserveOutcome struct {
	Status ReserveStatus
	// At is when the charge was decided: the recorded time for Replayed,
	// otherwise the time of this call (the Redis server's clock in
	// server-time mode). Adjustments of the charge refer to it.
	At time.Time
}

// SettleRequest settles a reservation by id.
type SettleRequest struct {
	// ID is the reservation's id.
	ID string
	// Actual is the request's real cost, 0..MaxCost: an item under
	// SettleActual is set to it, one under SettleKeep keeps its charge, one
	// under SettleRelease is refunded. Ignored when Cancel is set.
	Actual int64
	// Spend, if not nil, is the request's real spend, 0..MaxCost, which
	// items under SettleSpend are set to; nil keeps their charge.
	Spend *int64
	// Measures are further measures of the request, each 0..MaxCost, at
	// most MaxMeasures: an item under MeasureRule(k) is set to
	// Measures[k], and keeps its charge when k >= len(Measures).
	Measures []int64
	// Cancel refunds every item's whole charge, whatever its rule: the
	// request never happened.
	Cancel bool
	// Undo is Cancel that also deletes the record instead of keeping it
	// settled, so that a reserve of the id afterwards is decided afresh,
	// as if this one had never been made: for taking back the part of a
	// reservation that one store made when another store refused the
	// rest. A settle that finds no record leaves a tombstone either way.
	Undo bool
	// TTL is how long a settle that finds no reservation keeps a tombstone
	// under ID, so that a reserve of that id arriving later charges nothing
	// (Closed); 1ms..MaxPeriod, normally the reservations' TTL.
	TTL time.Duration
	// Noted, if not nil, receives the items that were reserved with a note
	// (ReserveRequest.Notes), in no set order, when this settlement applies
	// the reservation (Settled); it is emptied otherwise. The store writes
	// it before Settle returns, never after.
	Noted *[]Noted
}

// Validate reports whether the settlement can be applied; its error is a
// *FieldError naming the field.
func (r SettleRequest) Validate() error {
	if err := validateID(r.ID); err != nil {
		return err
	}
	if err := validateTTL(r.TTL); err != nil {
		return err
	}
	if r.Actual < 0 || r.Actual > MaxCost {
		return fieldErr("actual", "must be between 0 and %d, got %d", int64(MaxCost), r.Actual)
	}
	if r.Spend != nil && (*r.Spend < 0 || *r.Spend > MaxCost) {
		return fieldErr("spend", "must be between 0 and %d, got %d", int64(MaxCost), *r.Spend)
	}
	if len(r.Measures) > MaxMeasures {
		return fieldErr("measures", "at most %d, got %d", MaxMeasures, len(r.Measures))
	}
	for k, m := range r.Measures {
		if m < 0 || m > MaxCost {
			return fieldErr("measures["+strconv.Itoa(k)+"]", "must be between 0 and %d, got %d", int64(MaxCost), m)
		}
	}
	return nil
}

// SettleStatus is what a store did with a SettleRequest.
type SettleStatus uint8

// The statuses.
const (
	// Settled: the differences were applied; the record is kept, settled,
	// until its TTL.
	Settled SettleStatus = iota + 1
	// AlreadySettled: an earlier settle (or cancel) of the id was applied;
	// this one changed nothing.
	AlreadySettled
	// UnknownReservation: nothing is reserved under the id (never
	// reserved, denied, or expired, when an unsettled estimate simply
	// stands). Nothing changed but a tombstone (see SettleRequest.TTL).
	UnknownReservation
)

// String returns "settled", "already settled" or "unknown reservation".
func (s SettleStatus) String() string {
	switch s {
	case Settled:
		return "settled"
	case AlreadySettled:
		return "already settled"
	case UnknownReservation:
		return "unknown reservation"
	}
	return "SettleStatus(" + strconv.Itoa(int(s)) + ")"
}

// Reserver is implemented by a Store that keeps reservations: records
// written in the same atomic step as the charge they describe, so that any
// client of the store can settle any reservation exactly once, and a
// retried or late call never charges twice. It is optional: a store without
// it decides and adjusts, and a Limiter's Reserve and Settle over it answer
// an error matching ErrUnsupported.
type Reserver interface {
	// Reserve checks req.Items at now as Check does and, if admitted,
	// charges them and records the reservation under req.ID, atomically. It
	// writes one Result per item into results (the recorded ones when
	// Replayed; zero values with Limit set when Conflict or Closed).
	// Invalid requests return an error matching ErrInvalid.
	Reserve(ctx context.Context, now time.Time, req ReserveRequest, results []Result) (ReserveOutcome, error)
	// Settle applies req to the reservation recorded under req.ID at now:
	// each item's settled cost minus its charge, as an Adjustment at the
	// recorded charge time, and marks it settled, atomically.
	Settle(ctx context.Context, now time.Time, req SettleRequest) (SettleStatus, error)
}
