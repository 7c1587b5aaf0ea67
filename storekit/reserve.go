package storekit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/tokenlimit/tokenlimit"
)

// Rule returns req's settle rule for item i: SettleActual when req has no
// rules.
func Rule(req tokenlimit.ReserveRequest, i int) tokenlimit.SettleRule {
	if len(req.Rules) == 0 {
		return tokenlimit.SettleActual
	}
	return req.Rules[i]
}

// Digest identifies the request a reservation was made for: a SHA-256 over
// a length-prefixed encoding of every item's key, algorithm, parameters and
// cost and every rule, in order, as 32 hex digits (its first 128 bits). Two
// requests have the same digest only if they reserve the same thing, so a
// store compares digests to tell a replay from a conflict.
func Digest(req tokenlimit.ReserveRequest) string {
	h := sha256.New()
	var buf [8]byte
	num := func(v int64) {
		binary.BigEndian.PutUint64(buf[:], uint64(v))
		h.Write(buf[:])
	}
	num(int64(len(req.Items)))
	for i, it := range req.Items {
		num(int64(len(it.Key)))
		h.Write([]byte(it.Key))
		l := it.Limit
		num(int64(l.Algorithm))
		num(l.Quota)
		num(int64(l.Period))
		num(int64(l.Offset))
		num(l.Burst)
		num(it.Cost)
		num(int64(Rule(req, i)))
	}
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:16])
}

// Settled returns what an item charged cost under rule costs once req
// settles it: nothing when req cancels (or undoes) or the rule releases, the charge
// under SettleKeep (and SettleSpend without a spend), req's spend under
// SettleSpend, req's Measures[k] under MeasureRule(k) (the charge when req
// has fewer measures), req's actual cost otherwise.
func Settled(req tokenlimit.SettleRequest, rule tokenlimit.SettleRule, cost int64) int64 {
	switch {
	case req.Cancel || req.Undo || rule == tokenlimit.SettleRelease:
		return 0
	case rule == tokenlimit.SettleKeep, rule == tokenlimit.SettleSpend && req.Spend == nil:
		return cost
	case rule == tokenlimit.SettleSpend:
		return *req.Spend
	case rule >= tokenlimit.SettleMeasure:
		if k := int(rule - tokenlimit.SettleMeasure); k < len(req.Measures) {
			return req.Measures[k]
		}
		return cost
	}
	return req.Actual
}

// SettleDelta is the adjustment that settling a charge of cost under limit
// applies: settled - cost, within what one adjustment of that limit may
// carry (a bucket's ±MaxBucketSpan/num, see ValidateAdjustments), so that
// a settlement is never refused for its size.
func SettleDelta(limit tokenlimit.Limit, cost, settled int64) int64 {
	delta := settled - cost
	if bucketed(limit) {
		num, _ := limit.Interval()
		bound := MaxBucketSpan / num
		delta = max(-bound, min(bound, delta))
	}
	return delta
}

// NoCharge fills results, for a reservation that charged nothing without
// deciding (Conflict, Closed), with each item's limit and nothing else.
func NoCharge(items []tokenlimit.Item, results []tokenlimit.Result) {
	for i := range items {
		results[i] = tokenlimit.Result{Limit: items[i].Limit.Capacity()}
	}
}
