package service

import (
	"context"
	"strconv"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/alert"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// This file raises the warnings of limits with alert_at: a request whose
// charge crosses a threshold of a budget (one request does, as the store
// counts atomically) gets the threshold on its decision (Decision.Alerts,
// a warning header), and the event is claimed in the store, so that one
// replica alone notifies it per threshold, budget and window: the claim is
// a check of a budget of 1 per the limit's window, keyed by the budget's
// key and the threshold (the same Redis slot, a hash tag included). A
// budget that crosses a threshold again in the same window (a token bucket
// refilling, a refund) is not notified again. Only decisions the store
// made raise warnings: none while it fails.

// Alert is a threshold of a budget's use that a request crossed.
type Alert struct {
	// Limit is the limit's name, Percent the threshold (80 for 80%).
	Limit   string
	Percent int
}

// String writes a as a warning header's value: the limit's name and the
// threshold, such as `daily;threshold=80%`.
func (a Alert) String() string { return a.Limit + ";threshold=" + alert.FormatPercent(a.Percent) }

// AlertHeader is the header that carries a decision's Alerts, one value
// each (Alert.String), on the HTTP API's and the proxy's answers.
const AlertHeader = "X-Tokenlimit-Alert"

// raiseAlerts adds to d (the store's answer to checks, outcome i of
// check i) the thresholds its charges crossed, and claims and notifies
// their events.
func (s *Service) raiseAlerts(ctx context.Context, checks []check, d *Decision) {
	for i := range checks {
		c := &checks[i]
		if len(c.limit.AlertAt) == 0 {
			continue
		}
		o := &d.Limits[i]
		for _, p := range alert.Crossed(c.limit.AlertAt, o.Limit, o.Limit-o.Remaining, o.Cost) {
			d.Alerts = append(d.Alerts, Alert{Limit: o.Name, Percent: p})
			s.claimAlert(ctx, c, o, p, d.At)
		}
	}
}

// watchedBudget is a budget with alert_at that a reservation charged, and
// what it had used after that charge.
type watchedBudget struct {
	check check
	used  int64
}

// watchAlerts returns the budgets among checks (outcome i of check i) that
// have alert_at, with what each had used.
func watchAlerts(checks []check, outcomes []Outcome) []watchedBudget {
	var out []watchedBudget
	for i, c := range checks {
		if len(c.limit.AlertAt) > 0 {
			out = append(out, watchedBudget{c, outcomes[i].Limit - outcomes[i].Remaining})
		}
	}
	return out
}

// alertsAfterSettle raises the thresholds crossed since a reservation
// charged the budgets watched: a settlement above the estimate moves a
// budget without answering what it left, so the budgets are peeked at
// (one store call, made only for a reservation with alert_at limits) and
// every threshold between what they had used then and what they use now
// is claimed. One that another request crossed meanwhile and claimed is not
// sent twice; one crossed by a settlement is sent now.
func (s *Service) alertsAfterSettle(ctx context.Context, watched []watchedBudget) {
	if len(watched) == 0 {
		return
	}
	checks := make([]check, len(watched))
	for i, w := range watched {
		checks[i] = w.check
		checks[i].item.Cost = 0
	}
	b := newStoreCall(checks, true)
	a, err := s.fault.Decide(ctx, b.items, b.policies, b.results)
	if err != nil || a.Source != resilient.FromStore || a.Full {
		return
	}
	for i, w := range watched {
		o := w.check.outcome(b.results[i])
		used := o.Limit - o.Remaining
		for _, p := range alert.Crossed(w.check.limit.AlertAt, o.Limit, used, used-w.used) {
			s.claimAlert(ctx, &checks[i], &o, p, a.At)
		}
	}
}

// claimAlert claims the event of threshold p crossed by outcome o of c at
// at, and notifies it if this replica won the claim.
func (s *Service) claimAlert(ctx context.Context, c *check, o *Outcome, p int, at time.Time) {
	claim := []tokenlimit.Item{{Key: c.item.Key + "|alert=" + strconv.Itoa(p), Cost: 1, Limit: claimLimit(c.item.Limit)}}
	results := make([]tokenlimit.Result, 1)
	a, err := s.fault.Decide(ctx, claim, []resilient.Policy{{Store: c.limit.Store}}, results)
	if err != nil || a.Source != resilient.FromStore || a.Full || !results[0].Allowed {
		return // another replica's, or the store could not say: none sent
	}
	end := a.At.Add(results[0].ResetAfter)
	level, kind := c.levelName, c.level.String()
	if c.level == LevelPlan {
		level, kind = "config", "config"
		if c.levelName != "" {
			level, kind = c.levelName, "plan"
		}
	}
	s.alerts.Notify(alert.Event{
		ID: alert.ID(c.item.Key, p, end), Limit: o.Name, Level: level, LevelKind: kind,
		Threshold: alert.FormatPercent(p), Used: o.Limit - o.Remaining, LimitValue: o.Limit,
		Unit: o.Unit.String(), PeriodEnd: end, At: at,
	})
}

// claimLimit is the budget of an alert's claim for a budget of limit l:
// one claim per window of l (a fixed window of the same period and
// offset; a bucket's refill time, aligned to the epoch).
func claimLimit(l tokenlimit.Limit) tokenlimit.Limit {
	c := tokenlimit.FixedWindowLimit(1, l.Window())
	if l.Algorithm == tokenlimit.FixedWindow {
		c.Period, c.Offset = l.Period, l.Offset
	}
	return c
}
