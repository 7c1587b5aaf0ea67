package service

import (
	"context"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
)

// This file settles limits whose cost is counted in token classes (cost:
// output_tokens, cost: {expr: ...}): each is reserved at its cost on the
// request's estimated usage and settles to its cost on the real usage, a
// measure of the settlement of its own (tokenlimit.MeasureRule).

// measure is one cost in token classes of a reservation, and the request
// it is computed for.
type measure struct {
	limit   *config.Limit
	request int
	desc    map[string]string
	// names are the limits settled to the measure: limit's, and those of
	// later limits of the same class for the same request.
	names []string
}

// settleRule is how check's charge settles once the request's real cost
// is known: a token limit to that cost, a per-request cost stays, a
// concurrency slot is released, a spend budget settles to the request's
// spend (SettleSpend) or keeps its charge, and a cost in token classes to
// its measure, appended to measured unless an earlier limit has the same
// cost for the same request. Past tokenlimit.MaxMeasures distinct costs,
// a limit keeps its estimate.
func settleRule(c check, measured []measure) (tokenlimit.SettleRule, []measure) {
	switch unitOf(c.limit) {
	case InFlight:
		return tokenlimit.SettleRelease, measured
	case Requests:
		return tokenlimit.SettleKeep, measured
	case USD:
		return tokenlimit.SettleSpend, measured
	}
	if !c.limit.Cost.PerClass() {
		return tokenlimit.SettleActual, measured
	}
	for k, m := range measured {
		if sameCost(m.limit, c.limit) && m.request == c.request {
			measured[k].names = append(measured[k].names, c.limit.Name)
			return tokenlimit.MeasureRule(k), measured
		}
	}
	if len(measured) == tokenlimit.MaxMeasures {
		return tokenlimit.SettleKeep, measured
	}
	return tokenlimit.MeasureRule(len(measured)), append(measured, measure{limit: c.limit, request: c.request, desc: c.desc, names: []string{c.limit.Name}})
}

// sameCost reports whether limits a and b, counting token classes, cost
// the same: the same class, or one limit (an expression is never compared:
// it may not be comparable).
func sameCost(a, b *config.Limit) bool {
	return a == b || (a.Cost.Class != config.NoClass && a.Cost.Class == b.Cost.Class)
}

// Charges are what the limits counting token classes of a reservation
// are settled to, by limit name.
type Charges map[string]int64

// SettleUsage settles d, a reservation made by this process, to what the
// request really consumed: actual is its own cost, spend (if not nil) its
// price in micro-dollars, and usage its tokens by class, to which each limit
// counting token classes settles its cost (returned as charges, nil when
// there is none). A cost expression that fails or returns a negative cost
// settles to 0 and is counted. Otherwise it is SettleSpend (Settle when
// spend is nil). A reservation settled by id alone (Settle, from another
// process) leaves the limits counting token classes at their estimates.
// One reserved with ReserveOptions.InProcess is settled through d: what
// its leased limits paid from the leases settles there, once, however
// often d is settled.
func (s *Service) SettleUsage(ctx context.Context, d Decision, actual int64, spend *int64, usage config.Usage) (tokenlimit.SettleStatus, Charges, error) {
	if spend != nil && (*spend < 0 || *spend > tokenlimit.MaxCost) {
		return 0, nil, invalid("spend: must be between 0 and %d micro-dollars, got %d", int64(tokenlimit.MaxCost), *spend)
	}
	measures := s.measures(d.measured, actual, usage)
	st, err := s.settle(ctx, d.held, d.ReservationID, actual, spend, measures)
	return st, charges(d.measured, measures), err
}

// charges names each measure's value by the limits settled to it.
func charges(measured []measure, values []int64) Charges {
	if len(measured) == 0 {
		return nil
	}
	out := Charges{}
	for k, m := range measured {
		for _, name := range m.names {
			out[name] = values[k]
		}
	}
	return out
}

// measures returns each measure's cost on usage; nil when there are none.
func (s *Service) measures(measured []measure, actual int64, usage config.Usage) []int64 {
	if len(measured) == 0 {
		return nil
	}
	out := make([]int64, len(measured))
	for k, m := range measured {
		v, err := m.limit.Cost.Of(m.desc, actual, 0, &usage)
		if err != nil {
			s.metrics.costFailed(m.limit.Name, err)
		}
		out[k] = v
	}
	return out
}
