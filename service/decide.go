package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/breaker"
)

// decide runs a plan: the enforced checks in one atomic call, then, if they
// admit the request, the shadow checks in another. A plan of one limit with
// local_cache that the store denied recently is denied locally (overlimit.go).
func (s *Service) decide(ctx context.Context, p plan) (Decision, error) {
	if d, ok := s.cachedDenial(p); ok {
		return d, nil
	}
	d := Decision{Allowed: true, At: s.opts.Clock()}
	if len(p.enforced) > 0 {
		td, failed, err := s.checkStore(ctx, p.enforced)
		switch {
		case errors.Is(err, tokenlimit.ErrStoreFull):
			d = s.keySpaceFull(p.enforced, "store", err)
		case err != nil:
			return Decision{}, err
		case failed:
			d = s.failover(p.enforced)
		default:
			d.Allowed, d.At = td.Allowed, td.At
			d.Limits = outcomes(p.enforced, td.Results, false)
			if !td.Allowed {
				s.overLimit.record(p.enforced, td.Results, s.opts.Clock())
			}
		}
	}
	if d.Allowed {
		// Each shadow limit alone: one over its budget must not keep the
		// others from being charged as they would be if enforced.
		for _, c := range p.shadow {
			td, failed, err := s.checkStore(ctx, []check{c})
			if errors.Is(err, tokenlimit.ErrStoreFull) {
				continue // no room to count it: a shadow limit is only reported
			}
			if err != nil {
				return Decision{}, err
			}
			if !failed {
				d.Limits = append(d.Limits, outcomes([]check{c}, td.Results, false)...)
			}
		}
	}
	return d, nil
}

func outcomes(checks []check, results []tokenlimit.Result, failOpen bool) []Outcome {
	out := make([]Outcome, len(checks))
	for i, c := range checks {
		out[i] = Outcome{
			Name: c.limit.Name, Key: c.item.Key, Request: c.request, Cost: c.item.Cost,
			Shadow: c.limit.Shadow, FailOpen: failOpen, Result: results[i],
		}
	}
	return out
}

func items(checks []check) []tokenlimit.Item {
	out := make([]tokenlimit.Item, len(checks))
	for i, c := range checks {
		out[i] = c.item
	}
	return out
}

// checkStore calls the store through the breaker and timeout. failed reports
// a store failure (the caller applies failure modes); err is for invalid
// input (matching ErrInvalidRequest), a caller that gave up (its context's
// error), or a full store (matching tokenlimit.ErrStoreFull: the store is
// healthy but has no room for a new key), none of which is a store failure.
func (s *Service) checkStore(ctx context.Context, checks []check) (d tokenlimit.Decision, failed bool, err error) {
	d, _, failed, err = s.callStore(ctx, checks, false)
	return d, failed, err
}

// callStore checks, or reserves, checks on the store; see checkStore.
func (s *Service) callStore(ctx context.Context, checks []check, reserve bool) (d tokenlimit.Decision, r *tokenlimit.Reservation, failed bool, err error) {
	call := func(ctx context.Context) (tokenlimit.Decision, error) {
		if reserve {
			var err error
			d, r, err = s.limiter.Reserve(ctx, items(checks)...)
			return d, err
		}
		return s.limiter.Check(ctx, items(checks)...)
	}
	if !s.store.Remote {
		d, err = call(ctx)
		switch {
		case errors.Is(err, tokenlimit.ErrInvalid):
			return d, nil, false, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		case errors.Is(err, tokenlimit.ErrStoreFull):
			return d, nil, false, err
		case err != nil && ctx.Err() != nil:
			return d, nil, false, ctx.Err()
		case err != nil:
			s.metrics.storeErrors.Inc()
			s.log.ErrorContext(ctx, "store failed", "error", err)
			return d, nil, true, nil
		}
		return d, r, false, nil
	}
	ticket, ok := s.breaker.Allow()
	if !ok {
		return d, nil, true, nil
	}
	callCtx, cancel := context.WithTimeout(ctx, s.opts.StoreTimeout)
	defer cancel()
	d, err = call(callCtx)
	switch {
	case errors.Is(err, tokenlimit.ErrInvalid):
		s.breaker.Done(ticket, nil)
		return d, nil, false, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	case errors.Is(err, tokenlimit.ErrStoreFull): // it answered: healthy, only full
		s.breaker.Done(ticket, nil)
		return d, nil, false, err
	case err != nil && ctx.Err() != nil: // the caller gave up, not the store
		s.breaker.Cancel(ticket)
		return d, nil, false, ctx.Err()
	}
	trial := s.breaker.State() == breaker.HalfOpen
	s.breaker.Done(ticket, err)
	if err != nil {
		s.metrics.storeErrors.Inc()
		// A failed half-open trial only confirms the outage the breaker
		// already reported: once per cooldown, at debug.
		level := slog.LevelWarn
		if trial {
			level = slog.LevelDebug
		}
		s.log.Log(ctx, level, "store failed; applying failure modes", "error", err)
		return d, nil, true, nil
	}
	return d, r, false, nil
}

// failover decides while the store is failing: a fail-closed limit makes the
// request unavailable (503); fail-open limits are decided on the local
// in-memory budget, each at its configured share of the limit.
func (s *Service) failover(checks []check) Decision {
	d, _ := s.failoverReserve(checks, false)
	return d
}

// failoverReserve is failover that, when reserve is true and the local
// budget admits the request, also returns the local reservation, so that
// settling it refunds the estimate and releases concurrency slots locally.
func (s *Service) failoverReserve(checks []check, reserve bool) (Decision, *tokenlimit.Reservation) {
	d := Decision{At: s.opts.Clock()}
	var open []check
	for _, c := range checks {
		if !c.limit.FailOpen {
			d.Unavailable = true
			d.Limits = append(d.Limits, Outcome{Name: c.limit.Name, Key: c.item.Key, Request: c.request, Cost: c.item.Cost,
				Result: tokenlimit.Result{Limit: c.item.Limit.Capacity()}})
			continue
		}
		c.item.Limit = share(c.item.Limit, c.limit.FailOpenShare)
		open = append(open, c)
	}
	if d.Unavailable {
		return d, nil
	}
	var ld tokenlimit.Decision
	var res *tokenlimit.Reservation
	var err error
	if reserve {
		ld, res, err = s.local.Reserve(context.Background(), items(open)...)
	} else {
		ld, err = s.local.Check(context.Background(), items(open)...)
	}
	if errors.Is(err, tokenlimit.ErrStoreFull) {
		return s.keySpaceFull(open, "local", err), nil
	}
	if err != nil {
		s.log.Error("local fail-open budget failed", "error", err)
		d.Unavailable = true
		return d, nil
	}
	d.Allowed, d.Limits = ld.Allowed, outcomes(open, ld.Results, true)
	return d, res
}

// share scales a limit to a share of its budget, keeping at least 1.
func share(l tokenlimit.Limit, f float64) tokenlimit.Limit {
	if f >= 1 {
		return l
	}
	scale := func(v int64) int64 { return max(1, int64(math.Floor(float64(v)*f))) }
	if l.Burst != 0 {
		l.Burst = scale(l.Burst)
	}
	l.Quota = scale(l.Quota)
	return l
}
