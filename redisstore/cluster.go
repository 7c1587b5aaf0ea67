package redisstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// slotGroups splits items by Redis Cluster hash tag, in order of first
// appearance: each group lies in one slot.
func (s *Store) slotGroups(items []tokenlimit.Item) [][]int {
	var groups [][]int
	index := map[string]int{}
	for i, it := range items {
		tag := hashTag(s.Key(it.Key, it.Limit.Algorithm))
		g, ok := index[tag]
		if !ok {
			g = len(groups)
			index[tag] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// hashTag returns the part of a Redis key that Redis Cluster hashes.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
		return key[open+1 : open+1+end]
	}
	return key
}

// checkGroups decides items slot by slot, all at one time: the first slot's
// (the server's TIME in server-time mode), so that every item's charge has
// the time the check reports and a later Adjust refunds it exactly. When a
// slot denies, the slots charged before it are refunded, and every item's
// result is then the uncharged state (peeked again), as in a single atomic
// check.
func (s *Store) checkGroups(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result, groups [][]int) (time.Time, error) {
	times := make([]time.Time, 0, len(groups)) // when each charged group was decided
	callerTime := s.caller
	for g, group := range groups {
		part, partResults := pick(items, group)
		at, err := s.checkAt(ctx, now, callerTime, part, partResults)
		if err != nil {
			return now, s.undo(ctx, now, items, groups[:g], times, err)
		}
		now, callerTime = at, true // the next slots decide at the same time
		times = append(times, at)
		for j, i := range group {
			results[i] = partResults[j]
		}
		if allowed(partResults) {
			continue
		}
		if err := s.refundDetached(ctx, now, items, groups[:g], times); err != nil {
			return now, err
		}
		return times[0], s.peekUncharged(ctx, now, items, results, groups, g)
	}
	return times[0], nil
}

// undo refunds the groups already charged when a later one failed, and
// returns the failure. The refund runs on a detached context (see
// Options.RefundTimeout): the caller's may be what expired.
func (s *Store) undo(ctx context.Context, now time.Time, items []tokenlimit.Item, charged [][]int, times []time.Time, cause error) error {
	ctx, cancel := s.detached(ctx)
	defer cancel()
	if err := s.refund(ctx, now, items, charged, times); err != nil {
		return fmt.Errorf("%w (and refunding the slots already charged failed: %v)", cause, err)
	}
	return cause
}

// refundDetached is refund on a detached context (see Options.RefundTimeout).
func (s *Store) refundDetached(ctx context.Context, now time.Time, items []tokenlimit.Item, charged [][]int, times []time.Time) error {
	ctx, cancel := s.detached(ctx)
	defer cancel()
	return s.refund(ctx, now, items, charged, times)
}

// refund gives back the costs of the charged groups, each at the time it
// was charged, so that every algorithm refunds exactly what it took. It
// runs the refund script, which a full Redis runs too (refundEntry): when
// a later slot was refused because its node is full, the earlier slots are
// still put back, even if their nodes filled meanwhile. What can still
// leave them charged is a refund that does not arrive (a node down or
// slower than Options.RefundTimeout); the error then says so, and the
// charge lasts at most until its key expires (one window, or the bucket's
// refill of the cost).
func (s *Store) refund(ctx context.Context, now time.Time, items []tokenlimit.Item, charged [][]int, times []time.Time) error {
	for g, group := range charged {
		var adj []tokenlimit.Adjustment
		for _, i := range group {
			if it := items[i]; it.Cost > 0 {
				adj = append(adj, tokenlimit.Adjustment{Key: it.Key, Limit: it.Limit, Delta: -it.Cost, ChargedAt: times[g]})
			}
		}
		if len(adj) == 0 {
			continue
		}
		if err := s.adjustOnce(ctx, now, adj, refundSc); err != nil {
			return fmt.Errorf("redisstore: refunding a partly charged check: %w", err)
		}
	}
	return nil
}

// peekUncharged replaces the results of every group but the denying one by
// its state with nothing charged, keeping Allowed as each limit answered (or
// would answer) alone.
func (s *Store) peekUncharged(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result, groups [][]int, denying int) error {
	for g, group := range groups {
		if g == denying {
			continue
		}
		part, partResults := pick(items, group)
		costs := make([]int64, len(part))
		for j := range part {
			costs[j], part[j].Cost = part[j].Cost, 0
		}
		if _, err := s.checkOnce(ctx, now, part, partResults); err != nil {
			return err
		}
		for j, i := range group {
			r := partResults[j]
			if g > denying { // never decided: say whether it would have fitted
				r.Allowed = costs[j] <= r.Remaining
				r.CostExceedsLimit = costs[j] > r.Limit
			} else {
				r.Allowed = results[i].Allowed
			}
			results[i] = r
		}
	}
	return nil
}

func pick(items []tokenlimit.Item, group []int) ([]tokenlimit.Item, []tokenlimit.Result) {
	part := make([]tokenlimit.Item, len(group))
	for j, i := range group {
		part[j] = items[i]
	}
	return part, make([]tokenlimit.Result, len(group))
}

func allowed(results []tokenlimit.Result) bool {
	for _, r := range results {
		if !r.Allowed {
			return false
		}
	}
	return true
}

// adjustBySlot applies adjustments one slot at a time. Adjustments never
// deny, so only a store failure can leave some applied and others not; the
// error says so.
func (s *Store) adjustBySlot(ctx context.Context, now time.Time, adjustments []tokenlimit.Adjustment) error {
	items := make([]tokenlimit.Item, len(adjustments))
	for i, a := range adjustments {
		items[i] = tokenlimit.Item{Key: a.Key, Limit: a.Limit}
	}
	for g, group := range s.slotGroups(items) {
		part := make([]tokenlimit.Adjustment, len(group))
		for j, i := range group {
			part[j] = adjustments[i]
		}
		if err := s.adjustOnce(ctx, now, part, adjustSc); err != nil {
			if g > 0 {
				return fmt.Errorf("%w (the adjustments of %d other slots were applied)", err, g)
			}
			return err
		}
	}
	return nil
}
