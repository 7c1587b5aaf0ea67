package service

import (
	"context"
	"slices"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
)

// This file describes limits to clients, as "N per window" (Policy,
// PolicyOf, LimitFor), and holds what protocols such as Envoy's Rate Limit
// Service need beyond Check: requests that may select the same budget more
// than once (CheckMerged).

// Policy describes the budget behind an Outcome as "Limit per Window", the
// shape in which Envoy's RLS (current_limit) and the IETF RateLimit-Policy
// field describe a limit.
type Policy struct {
	// Limit is the most cost the budget admits at once (Limit.Capacity).
	Limit int64
	// Window is how long the budget takes to go from empty to full: the
	// window of a window algorithm, the time to refill the whole capacity
	// for a token bucket or GCRA (capacity 10 refilling 2/s: 5s), the day's
	// or month's length for a calendar quota.
	Window time.Duration
	// Calendar is the calendar a quota follows, NoCalendar for none.
	Calendar config.Calendar
}

// PolicyOf returns the policy of a limit, per Policy.
func PolicyOf(l tokenlimit.Limit) Policy {
	return Policy{Limit: l.Capacity(), Window: l.Window()}
}

// CheckMerged is Check for requests that may select the same budget more
// than once, as overlapping Envoy RLS descriptors do ({user} and {user,
// route} both selecting a per-user limit). Check refuses a budget repeated
// within one call; CheckMerged charges it once with the sum of the costs the
// requests put on it, and reports its outcome for every request that
// selected it. The decision stays all or nothing across all requests.
//
// It also returns the Policy of every outcome, in the order of
// Decision.Limits, from the limit each was decided under (api-key overrides
// and calendar windows included).
func (s *Service) CheckMerged(ctx context.Context, reqs ...Request) (Decision, []Policy, error) {
	ctx, span := s.startDecision(ctx, OpCheck)
	d, policies, err := s.checkMerged(ctx, reqs)
	endDecision(span, &d, err)
	return d, policies, err
}

func (s *Service) checkMerged(ctx context.Context, reqs []Request) (Decision, []Policy, error) {
	start := time.Now()
	var buf planBuffer
	p, err := s.plan(reqs, buf[:0])
	if err != nil {
		return Decision{}, nil, err
	}
	// A call selects a few budgets (at most tokenlimit.MaxItems per store
	// call): linear searches beat maps here, and allocate nothing.
	var aliases []alias // further requests selecting a budget already selected
	p.enforced, aliases = merge(p.enforced, aliases)
	p.shadow, aliases = merge(p.shadow, aliases)
	d, err := s.decide(ctx, p)
	if err != nil {
		return Decision{}, nil, err
	}
	s.metrics.observe(d, time.Since(start))
	if len(aliases) > 0 {
		limits := make([]Outcome, 0, len(d.Limits)+len(aliases))
		for _, o := range d.Limits {
			limits = append(limits, o)
			for _, a := range aliases {
				if a.key == o.Key {
					o.Request, o.Cost = a.request, a.cost
					limits = append(limits, o)
				}
			}
		}
		d.Limits = limits
	}
	out := make([]Policy, len(d.Limits))
	for i, o := range d.Limits {
		if c, ok := checkOf(p, o.Key); ok {
			out[i] = PolicyOf(c.item.Limit)
			out[i].Calendar = c.limit.Calendar
		}
		out[i].Limit = o.Limit
	}
	return d, out, nil
}

// alias is a request that selected a budget an earlier request of the same
// call selected, with the cost it put on it.
type alias struct {
	key     string
	request int
	cost    int64
}

// merge folds the checks of one budget into the first of them, summing
// their costs, and appends the others to aliases.
func merge(checks []check, aliases []alias) ([]check, []alias) {
	out := checks[:0]
	for _, c := range checks {
		i := slices.IndexFunc(out, func(o check) bool { return o.item.Key == c.item.Key })
		if i < 0 {
			out = append(out, c)
			continue
		}
		out[i].item.Cost = min(out[i].item.Cost+c.item.Cost, tokenlimit.MaxCost+1)
		aliases = append(aliases, alias{c.item.Key, c.request, c.item.Cost})
	}
	return out, aliases
}

// checkOf returns the check of p on the budget key.
func checkOf(p plan, key string) (check, bool) {
	for _, checks := range [2][]check{p.enforced, p.shadow} {
		for _, c := range checks {
			if c.item.Key == key {
				return c, true
			}
		}
	}
	return check{}, false
}

// LimitFor returns the engine limit that the limit named name applies, right
// now, to a request with these descriptors: the configured one, or the
// request's api key override, and for a calendar quota the window of the
// current day or month. Transports use it to describe a limit's policy (the
// IETF RateLimit-Policy window). ok is false when no limit in force has that
// name, for example after a reload removed it.
func (s *Service) LimitFor(name string, descriptors map[string]string) (l tokenlimit.Limit, ok bool) {
	cfg := s.rules.Load().cfg
	for i := range cfg.Limits {
		cl := &cfg.Limits[i]
		if cl.Name != name {
			continue
		}
		id, _ := identityOf(cfg, descriptors)
		l, _ = effective(cfg, cl, id.Overrides, s.opts.Clock())
		return l, true
	}
	return tokenlimit.Limit{}, false
}
