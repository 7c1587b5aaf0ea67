package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// decide runs a plan: the enforced checks in one atomic call, then, if they
// admit the request, the shadow checks in another. A plan of one limit with
// local_cache that the store denied recently is denied locally (overlimit.go).
// Fail-open budgets recovering from an outage are charged on their local
// budgets first, and refunded there unless the store admits (recovery.go).
func (s *Service) decide(ctx context.Context, p plan) (Decision, error) {
	if d, ok := s.cachedDenial(p); ok {
		return d, nil
	}
	d := Decision{Allowed: true}
	if len(p.enforced) == 0 {
		d.At = s.opts.Clock()
	} else {
		h, hd, ok := s.holdLocal(ctx, p.enforced)
		if !ok {
			return hd, nil
		}
		td, failed, err := s.checkStore(ctx, p.enforced)
		if err != nil || failed || !td.Allowed {
			s.release(h)
		}
		switch {
		case errors.Is(err, tokenlimit.ErrStoreFull):
			d = s.keySpaceFull(p.enforced, "store", err)
		case err != nil:
			return Decision{}, err
		case failed:
			d = s.failover(p.enforced)
		default:
			d.Allowed, d.At = td.Allowed, td.At
			d.Limits = fillOutcomes(td.outcomes, p.enforced, td.Results, false)
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
				d.Limits = append(d.Limits, fillOutcomes(td.outcomes, []check{c}, td.Results, false)...)
			}
		}
	}
	return d, nil
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

func items(checks []check) []tokenlimit.Item {
	return fillItems(make([]tokenlimit.Item, len(checks)), checks)
}

func fillItems(out []tokenlimit.Item, checks []check) []tokenlimit.Item {
	for i, c := range checks {
		out[i] = c.item
	}
	return out
}

// storeCall holds what one store check of one limit needs, the common case,
// in one allocation: the item, its result and the outcome reported.
type storeCall struct {
	items    [1]tokenlimit.Item
	results  [1]tokenlimit.Result
	outcomes [1]Outcome
}

// callBuffers returns the items (filled from checks), the results and the
// outcomes of a store check of checks.
func callBuffers(checks []check) ([]tokenlimit.Item, []tokenlimit.Result, []Outcome) {
	if len(checks) == 1 {
		b := new(storeCall)
		return fillItems(b.items[:], checks), b.results[:], b.outcomes[:]
	}
	return items(checks), make([]tokenlimit.Result, len(checks)), make([]Outcome, len(checks))
}

// checkStore checks checks on the store through the breaker and timeout.
// failed reports a store failure (the caller applies failure modes); err is
// for invalid input (matching ErrInvalidRequest), a caller that gave up (its
// context's error), or a full store (matching tokenlimit.ErrStoreFull: the
// store is healthy but has no room for a new key), none of which is a store
// failure.
func (s *Service) checkStore(ctx context.Context, checks []check) (d storeDecision, failed bool, err error) {
	items, results, outs := callBuffers(checks)
	failed, err = s.call(ctx, opCheck, func(ctx context.Context) error {
		if err := s.writeBack(ctx, checks); err != nil {
			return err
		}
		at, err := s.opts.Store.Check(ctx, s.opts.Clock(), items, results)
		if err != nil {
			return fmt.Errorf("tokenlimit: check: %w", err)
		}
		d = storeDecision{Allowed: allAllowed(results), At: at, Results: results, outcomes: outs}
		return nil
	})
	if !failed && err == nil {
		s.remember(checks, d.Results, d.At)
	}
	return d, failed, err
}

// storeDecision is the store's answer to a check, with room for the
// outcomes the service reports from it.
type storeDecision struct {
	Allowed  bool
	At       time.Time
	Results  []tokenlimit.Result
	outcomes []Outcome
}

func allAllowed(results []tokenlimit.Result) bool {
	for _, r := range results {
		if !r.Allowed {
			return false
		}
	}
	return true
}

// writeBack charges the store what fail-open budgets among checks admitted
// locally while it failed, in the call that follows (the breaker's trial
// included), before that call's own request: the sooner the store counts
// it, the less it grants other replicas that it has already admitted.
func (s *Service) writeBack(ctx context.Context, checks []check) error {
	if !s.failOpen.AnyPending() {
		return nil
	}
	var w resilient.Writeback
	now := s.opts.Clock()
	for _, c := range checks {
		s.failOpen.TakePending(&w, c.item, now)
	}
	return s.charge(ctx, w)
}

// remember records the store's answers to checks, decided at at, for
// their fail-open budgets (resilient.FailOpen.Remember).
func (s *Service) remember(checks []check, results []tokenlimit.Result, at time.Time) {
	for i, c := range checks {
		s.failOpen.Remember(c.item, policyOf(c.limit), results[i], at, s.opts.Clock)
	}
}

// policyOf is what l's items do while the store fails.
func policyOf(l *config.Limit) resilient.Policy {
	return resilient.Policy{Open: l.FailOpen, Share: l.FailOpenShare, Limit: l.Name, Shadow: l.Shadow, Lease: l.Concurrency}
}

// charge charges w to the store. A failed call puts the cost back to be
// tried again: it may then be charged twice (the failed call may have
// landed), which denies early but never admits past the limit.
func (s *Service) charge(ctx context.Context, w resilient.Writeback) error {
	if len(w.Adjustments) == 0 {
		return nil
	}
	err := s.opts.Store.Adjust(ctx, s.opts.Clock(), w.Adjustments)
	result := resilient.WritebackOK
	if err != nil {
		result = resilient.WritebackFailed
	}
	for i, a := range w.Adjustments {
		s.metrics.writeback.WithLabelValues(w.Limits[i], result).Add(float64(a.Delta))
	}
	if errors.Is(err, tokenlimit.ErrInvalid) { // says nothing about the store: decide on
		s.log.Error("writing back fail-open charges was refused", "error", err)
		return nil
	}
	if err != nil {
		s.failOpen.PutBack(w, s.opts.Clock())
		return fmt.Errorf("writing back fail-open charges: %w", err)
	}
	s.failOpen.WrittenBack(w.Adjustments, s.opts.Clock())
	return nil
}

// The store operations, for logs and metrics.
const (
	opCheck   = "check"
	opReserve = "reserve"
	opSettle  = "settle"
)

// call runs op against the store through the resilient store (its
// breaker and timeout; a caller that has already given up makes no call).
// failed reports a store failure; err is invalid input (matching
// ErrInvalidRequest), a full store (matching tokenlimit.ErrStoreFull) or
// the caller's context error. A plain check that failed once sent may or
// may not have been applied: it is counted as an outcome unknown.
// (Reserves and settles are bound to an id and reconcile.)
func (s *Service) call(ctx context.Context, op string, run func(ctx context.Context) error) (failed bool, err error) {
	err = s.guard.Call(ctx, run)
	var fe *resilient.FailedError
	switch {
	case err == nil:
		s.storeAnswered()
		return false, nil
	case errors.Is(err, tokenlimit.ErrInvalid):
		return false, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	case errors.Is(err, tokenlimit.ErrStoreFull): // it answered: healthy, only full
		return false, err
	case !errors.As(err, &fe): // the caller gave up, not the store
		if op == opCheck && s.store.Remote {
			s.metrics.outcomeUnknown.Inc()
		}
		return false, err
	case errors.Is(fe.Err, resilient.ErrBreakerOpen):
		return true, nil
	}
	s.metrics.storeErrors.Inc()
	if op == opCheck && s.store.Remote {
		s.metrics.outcomeUnknown.Inc()
	}
	// A failed half-open trial only confirms the outage the breaker
	// already reported: once per cooldown, at debug.
	level := slog.LevelWarn
	switch {
	case !s.store.Remote:
		level = slog.LevelError
	case fe.Trial:
		level = slog.LevelDebug
	}
	s.log.Log(ctx, level, "store failed; applying failure modes", "op", op, "error", fe.Err)
	return true, nil
}

// failover decides while the store is failing: a fail-closed limit makes the
// request unavailable (503); fail-open limits are decided on the local
// in-memory budget, each at its configured share of the limit, started from
// the store's last answer (failopen.go) and written back once it answers.
func (s *Service) failover(checks []check) Decision {
	d, open := s.failClosed(checks)
	if d.Unavailable {
		return d
	}
	now := s.opts.Clock()
	var ld tokenlimit.Decision
	err := s.seed(open, now)
	if err == nil {
		ld, err = s.local.Check(context.Background(), items(open)...)
	}
	if err == nil {
		s.answeredLocally(open, ld.Results, ld.At, now)
	}
	if err == nil && ld.Allowed {
		s.admitted(open, ld.Results, ld.At, now)
	}
	if errors.Is(err, tokenlimit.ErrStoreFull) {
		return s.keySpaceFull(open, "local", err)
	}
	if err != nil {
		s.log.Error("local fail-open budget failed", "error", err)
		return Decision{At: s.opts.Clock(), Unavailable: true}
	}
	d.Allowed, d.Limits = ld.Allowed, outcomes(open, ld.Results, true)
	return d
}

// failoverReserve is failover for a reservation: the fail-open limits are
// reserved on the local budget under the same id (so that a settle finds
// it), with their shares.
func (s *Service) failoverReserve(checks []check, req tokenlimit.ReserveRequest) Decision {
	d, open := s.failClosed(checks)
	if d.Unavailable {
		return d
	}
	storeReq := req
	req.Items = items(open)
	now := s.opts.Clock()
	var res *tokenlimit.Reservation
	err := s.seed(open, now)
	if err == nil {
		res, err = s.local.ReserveWith(context.Background(), req)
	}
	if err == nil && (res.Status().Admitted() || res.Status() == tokenlimit.Denied) {
		s.answeredLocally(open, res.Decision().Results, res.Decision().At, now)
	}
	if err == nil && res.Status() == tokenlimit.Reserved { // a replay charges nothing more
		// The store learns of it by id (see reconciler): the reserve may
		// have reached it and been charged there already. Only when too
		// many wait is it written back as a plain fail-open charge.
		if s.pending.addReserve(storeReq, now.Add(s.opts.ReservationTTL)) != nil {
			s.admitted(open, res.Decision().Results, res.Decision().At, now)
		}
	}
	if errors.Is(err, tokenlimit.ErrStoreFull) {
		return s.keySpaceFull(open, "local", err)
	}
	if err == nil {
		d, err = reservationDecision(open, res, true)
	}
	if err != nil { // the id is in use there
		s.log.Error("local fail-open reservation failed", "error", err)
		return Decision{At: s.opts.Clock(), Unavailable: true}
	}
	return d
}

// failClosed returns the decision for checks while the store fails if a
// fail-closed limit makes it unavailable, and otherwise the fail-open
// checks scaled to their shares.
func (s *Service) failClosed(checks []check) (Decision, []check) {
	d := Decision{At: s.opts.Clock()}
	var open []check
	for _, c := range checks {
		if !c.limit.FailOpen {
			d.Unavailable = true
			d.Limits = append(d.Limits, c.outcome(tokenlimit.Result{Limit: c.item.Limit.Capacity()}))
			continue
		}
		c.item.Limit = resilient.ShareOf(c.item.Limit, c.limit.FailOpenShare)
		open = append(open, c)
	}
	return d, open
}

// seed starts the local budgets of open (fail-open checks scaled to their
// shares) from the store's last answers (resilient.FailOpen.Seed).
func (s *Service) seed(open []check, now time.Time) error {
	for _, c := range open {
		if err := s.failOpen.Seed(s.localStore, c.item, now); err != nil {
			return err
		}
	}
	return nil
}

// answeredLocally records that the local budgets answered open with
// results at at: their budgets recover from now on.
func (s *Service) answeredLocally(open []check, results []tokenlimit.Result, at, now time.Time) {
	for i, c := range open {
		s.failOpen.AnsweredLocally(c.item, policyOf(c.limit), results[i], at, now)
	}
}

// admitted records what the local budgets admitted for open, to write back
// once the store answers.
func (s *Service) admitted(open []check, results []tokenlimit.Result, at, now time.Time) {
	for i, c := range open {
		s.failOpen.Admitted(c.item, policyOf(c.limit), results[i], at, now)
	}
}
