package storekit

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// ValidateItems checks items and results for a Store.Check call; stores call
// it before touching any state. Its error matches tokenlimit.ErrInvalid and
// names the index of the offending item.
func ValidateItems(items []tokenlimit.Item, results []tokenlimit.Result) error {
	if len(items) == 0 {
		return fieldErr("items", "at least one item is required")
	}
	if len(items) > tokenlimit.MaxItems {
		return fieldErr("items", "at most %d items per check, got %d", tokenlimit.MaxItems, len(items))
	}
	if len(results) != len(items) {
		return fieldErr("results", "need one result per item: %d items, %d results", len(items), len(results))
	}
	for i := range items {
		if err := ValidateItem(items[i]); err != nil {
			return indexed("items", i, err)
		}
		for j := range i {
			if items[j].Key == items[i].Key && items[j].Limit.Algorithm == items[i].Limit.Algorithm {
				return fieldErr("items["+strconv.Itoa(i)+"].key", "%q under %s repeats items[%d]: one budget per key and algorithm", items[i].Key, items[i].Limit.Algorithm, j)
			}
		}
	}
	return nil
}

// ValidateItem reports whether one item can be checked; its error is a
// *tokenlimit.FieldError naming the field ("key", "cost", or the limit's).
func ValidateItem(it tokenlimit.Item) error {
	if err := it.Limit.Validate(); err != nil {
		return err
	}
	return validateKeyCost(it.Key, "cost", it.Cost, 0)
}

func validateKeyCost(key, costField string, cost, minCost int64) error {
	switch {
	case key == "":
		return fieldErr("key", "must not be empty")
	case len(key) > tokenlimit.MaxKeyLength:
		return fieldErr("key", "must be at most %d bytes, got %d", tokenlimit.MaxKeyLength, len(key))
	case cost < minCost:
		return fieldErr(costField, "must be at least %d, got %d", minCost, cost)
	case cost > tokenlimit.MaxCost:
		return fieldErr(costField, "must be at most %d, got %d", int64(tokenlimit.MaxCost), cost)
	}
	return nil
}

// ValidateAdjustments checks adjustments for a Store.Adjust call, like
// ValidateItems: each names a valid budget, |Delta| is at most MaxCost (and,
// for a bucket, within ±MaxBucketSpan/num, see SettleDelta) and ChargedAt
// passes ValidateTime.
func ValidateAdjustments(adjustments []tokenlimit.Adjustment) error {
	if len(adjustments) > tokenlimit.MaxItems {
		return fieldErr("adjustments", "at most %d per call, got %d", tokenlimit.MaxItems, len(adjustments))
	}
	for i, a := range adjustments {
		if err := validateAdjustment(a); err != nil {
			return indexed("adjustments", i, err)
		}
		for j := range i {
			if adjustments[j].Key == a.Key && adjustments[j].Limit.Algorithm == a.Limit.Algorithm {
				return fieldErr("adjustments["+strconv.Itoa(i)+"].key", "%q under %s repeats adjustments[%d]", a.Key, a.Limit.Algorithm, j)
			}
		}
	}
	return nil
}

func validateAdjustment(a tokenlimit.Adjustment) error {
	if err := a.Limit.Validate(); err != nil {
		return err
	}
	if err := validateKeyCost(a.Key, "delta", a.Delta, -tokenlimit.MaxCost); err != nil {
		return err
	}
	if err := ValidateTime("charged_at", a.ChargedAt); err != nil {
		return err
	}
	if bucketed(a.Limit) {
		num, _ := a.Limit.Interval()
		if limit := MaxBucketSpan / num; a.Delta > limit || -a.Delta > limit {
			return fieldErr("delta", "must be within ±%d for %s, got %d", limit, a.Limit, a.Delta)
		}
	}
	return nil
}

// ValidateKey checks a key and algorithm for Store.Reset.
func ValidateKey(key string, alg tokenlimit.Algorithm) error {
	if !alg.Valid() {
		return fieldErr("algorithm", "unknown algorithm %d", alg)
	}
	return validateKeyCost(key, "cost", 0, 0)
}

// ValidateTime checks a time a store computes with, such as the now of a
// Check in caller-time mode or an adjustment's ChargedAt: it must lie in
// [the Unix epoch, 2^53 µs after it), the range in which both stores count
// microseconds exactly (about the year 2255). Its error is a
// *tokenlimit.FieldError naming field.
func ValidateTime(field string, t time.Time) error {
	switch {
	case t.Before(epoch):
		return fieldErr(field, "%s is before the Unix epoch", t.UTC().Format(time.RFC3339Nano))
	case !t.Before(maxTime):
		return fieldErr(field, "%s is at or after 2^53 µs since the Unix epoch", t.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

var (
	epoch   = time.Unix(0, 0)
	maxTime = time.UnixMicro(MaxExact)
)

// ValidateReserve reports whether req can be reserved with results (one per
// item), for a Reserver's Reserve; its error is a *tokenlimit.FieldError
// naming the field. The id and TTL follow a settlement's rules
// (SettleRequest.Validate): a reservation is settled under them.
func ValidateReserve(req tokenlimit.ReserveRequest, results []tokenlimit.Result) error {
	if err := (tokenlimit.SettleRequest{ID: req.ID, TTL: req.TTL}).Validate(); err != nil {
		return err
	}
	if len(req.Rules) != 0 && len(req.Rules) != len(req.Items) {
		return fieldErr("rules", "need one rule per item or none: %d items, %d rules", len(req.Items), len(req.Rules))
	}
	for i, rule := range req.Rules {
		if rule >= tokenlimit.SettleMeasure+tokenlimit.MaxMeasures {
			return fieldErr("rules["+strconv.Itoa(i)+"]", "unknown settle rule %d", rule)
		}
	}
	if len(req.Notes) != 0 && len(req.Notes) != len(req.Items) {
		return fieldErr("notes", "need one note per item or none: %d items, %d notes", len(req.Items), len(req.Notes))
	}
	for i, note := range req.Notes {
		if len(note) > tokenlimit.MaxNoteLength {
			return fieldErr("notes["+strconv.Itoa(i)+"]", "must be at most %d bytes, got %d", tokenlimit.MaxNoteLength, len(note))
		}
	}
	return ValidateItems(req.Items, results)
}

func indexed(list string, i int, err error) error {
	var fe *tokenlimit.FieldError
	if errors.As(err, &fe) {
		return &tokenlimit.FieldError{Field: list + "[" + strconv.Itoa(i) + "]." + fe.Field, Reason: fe.Reason}
	}
	return err
}

func fieldErr(field, format string, args ...any) error {
	return &tokenlimit.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
