package service

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// decide runs a plan: the enforced checks in one call to the fault layer
// (resilient.Failover: the store, or the failure modes while it fails),
// then, if they admit the request, the shadow checks, each alone. A plan of
// one limit with local_cache that the store denied recently is denied
// locally (overlimit.go).
func (s *Service) decide(ctx context.Context, p plan) (Decision, error) {
	if d, ok := s.cachedDenial(p); ok {
		return d, nil
	}
	d := Decision{Allowed: true, At: s.opts.Clock()}
	if len(p.enforced) > 0 {
		b := newStoreCall(p.enforced, false)
		a, err := s.fault.Decide(ctx, b.items, b.policies, b.results)
		if err != nil {
			return Decision{}, s.storeError(err)
		}
		d = s.decision(a, b)
		switch {
		case a.Source != resilient.FromStore || a.Full:
		case a.Allowed:
			s.raiseAlerts(ctx, p.enforced, &d)
		default:
			s.overLimit.record(p.enforced, b.results, s.opts.Clock())
		}
	}
	if !d.Allowed {
		return d, nil
	}
	// Each shadow limit alone: one over its budget must not keep the
	// others from being charged as they would be if enforced. One that the
	// store cannot count (failing, full) is not reported.
	for _, c := range p.shadow {
		b := newStoreCall([]check{c}, false)
		a, err := s.fault.Decide(ctx, b.items, b.policies, b.results)
		if err != nil {
			return Decision{}, s.storeError(err)
		}
		if a.Source == resilient.FromStore && !a.Full {
			d.Limits = append(d.Limits, fillOutcomes(b.outcomes, b.checks, b.results, false)...)
		}
	}
	return d, nil
}

// decision turns the fault layer's answer a to the call b into the
// service's decision.
func (s *Service) decision(a resilient.Answer, b storeCall) Decision {
	checks := b.checks
	if a.Full {
		which := "store"
		if a.Source == resilient.FromLocal {
			which = "local"
		}
		return s.keySpaceFull(checks, which)
	}
	d := Decision{Allowed: a.Allowed, At: a.At, Unavailable: a.Source == resilient.Unavailable}
	failOpen := a.Source == resilient.FromLocal || a.Source == resilient.HeldLocal
	if a.Items == nil {
		d.Limits = fillOutcomes(b.outcomes, checks, b.results, failOpen)
		if a.Local != nil { // a call spanning stores: only some failed over
			for i := range d.Limits {
				d.Limits[i].FailOpen = slices.Contains(a.Local, i)
			}
		}
		return d
	}
	d.Limits = make([]Outcome, len(a.Items))
	for j, i := range a.Items {
		fillOutcomes(d.Limits[j:j+1], checks[i:i+1], b.results[i:i+1], failOpen)
	}
	return d
}

// storeError is the error of a fault layer's call: an invalid request
// (matching ErrInvalidRequest) or the caller's context error.
func (s *Service) storeError(err error) error {
	if errors.Is(err, tokenlimit.ErrInvalid) {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return err
}

func outcomes(checks []check, results []tokenlimit.Result, failOpen bool) []Outcome {
	return fillOutcomes(make([]Outcome, len(checks)), checks, results, failOpen)
}

// fillOutcomes sets out[i] to the outcome of checks[i] with results[i], and
// returns out.
func fillOutcomes(out []Outcome, checks []check, results []tokenlimit.Result, failOpen bool) []Outcome {
	for i := range checks {
		out[i] = checks[i].outcome(results[i])
		out[i].FailOpen = failOpen
	}
	return out
}

// storeCall is what one call to the fault layer on checks needs: the
// items, their policies and results, and the outcomes reported. A call of
// one check, the common case, takes one allocation (oneCall), and so does
// one of a few checks (fewCalls; BenchmarkCheckThreeLimits: 14 allocations
// for three limits instead of 17 with a slice each).
type storeCall struct {
	checks   []check
	items    []tokenlimit.Item
	policies []resilient.Policy
	results  []tokenlimit.Result
	outcomes []Outcome
}

// oneCall holds a storeCall's slices for one check.
type oneCall struct {
	items    [1]tokenlimit.Item
	policies [1]resilient.Policy
	results  [1]tokenlimit.Result
	outcomes [1]Outcome
}

// fewChecks is the most checks fewCalls holds.
const fewChecks = 4

// fewCalls holds a storeCall's slices for up to fewChecks checks.
type fewCalls struct {
	items    [fewChecks]tokenlimit.Item
	policies [fewChecks]resilient.Policy
	results  [fewChecks]tokenlimit.Result
	outcomes [fewChecks]Outcome
}

// newStoreCall returns the buffers of a call on checks, the items filled
// from them and their policies (closed for a peek: a peek's answer is the
// store's or none).
func newStoreCall(checks []check, peek bool) storeCall {
	var b storeCall
	switch n := len(checks); {
	case n == 1:
		o := new(oneCall)
		b = storeCall{checks, o.items[:], o.policies[:], o.results[:], o.outcomes[:]}
	case n <= fewChecks:
		o := new(fewCalls)
		b = storeCall{checks, o.items[:n], o.policies[:n], o.results[:n], o.outcomes[:n]}
	default:
		b = storeCall{checks, make([]tokenlimit.Item, n), make([]resilient.Policy, n), make([]tokenlimit.Result, n), make([]Outcome, n)}
	}
	for i, c := range checks {
		b.items[i] = c.item
		if peek {
			b.policies[i] = resilient.Policy{Store: c.limit.Store}
		} else {
			b.policies[i] = policyOf(c.limit)
		}
	}
	return b
}

// policyOf is what l's items do while the store fails.
func policyOf(l *config.Limit) resilient.Policy {
	return resilient.Policy{Open: l.FailOpen, Share: l.FailOpenShare, Limit: l.Name, Shadow: l.Shadow, Concurrency: l.Concurrency, Lease: l.Lease, Store: l.Store}
}
