package service

import (
	"context"
	"fmt"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
)

// LimitInfo describes one effective limit, for listings.
type LimitInfo struct {
	Name      string               `json:"name"`
	Match     map[string]string    `json:"match,omitempty"`
	Key       []string             `json:"key"`
	Algorithm tokenlimit.Algorithm `json:"algorithm"`
	// Concurrency marks a limit on requests in flight: a sliding log whose
	// window is the lease.
	Concurrency bool            `json:"concurrency,omitempty"`
	Quota       int64           `json:"quota"`
	PeriodMs    int64           `json:"period_ms"`
	Burst       int64           `json:"burst,omitempty"`
	Cost        string          `json:"cost"`
	Shadow      bool            `json:"shadow,omitempty"`
	FailOpen    bool            `json:"fail_open"`
	Calendar    config.Calendar `json:"calendar,omitempty"`
	// Unit is "usd" for a spend budget, whose quota and burst are in
	// micro-dollars; empty otherwise.
	Unit string `json:"unit,omitempty"`
}

// Limits lists the limits in force, in configuration order.
func (s *Service) Limits() []LimitInfo {
	cfg := s.rules.Load().cfg
	out := make([]LimitInfo, len(cfg.Limits))
	for i, l := range cfg.Limits {
		match := map[string]string{}
		for k, v := range l.Match {
			match[k] = string(v)
		}
		out[i] = LimitInfo{
			Name: l.Name, Match: match, Key: l.Key, Algorithm: l.Limit.Algorithm, Concurrency: l.Concurrency,
			Quota: l.Limit.Quota, PeriodMs: l.Limit.Period.Milliseconds(), Burst: l.Limit.Burst,
			Cost: costString(l.Cost), Shadow: l.Shadow, FailOpen: l.FailOpen, Calendar: l.Calendar,
		}
		if l.Cost.Spend {
			out[i].Unit = USD.String()
		}
	}
	return out
}

func costString(c config.Cost) string {
	switch {
	case c.Constant > 0:
		return fmt.Sprint(c.Constant)
	case c.By != "":
		return fmt.Sprintf("by %s %v default %d", c.By, c.Weights, c.Default)
	case c.Spend:
		return "spend"
	}
	return "request"
}

// Inspect reports the state of every limit req selects without charging
// anything (each is peeked with cost 0).
func (s *Service) Inspect(ctx context.Context, req Request) (Decision, error) {
	p, err := s.planWith([]Request{req}, true, false)
	if err != nil {
		return Decision{}, err
	}
	checks := append(p.enforced, p.shadow...)
	for i := range checks {
		checks[i].item.Cost = 0
	}
	if len(checks) == 0 {
		return Decision{Allowed: true, At: s.opts.Clock()}, nil
	}
	td, failed, err := s.checkStore(ctx, checks)
	if err != nil {
		return Decision{}, err
	}
	if failed {
		return Decision{}, fmt.Errorf("service: inspect: the store is failing")
	}
	d := Decision{Allowed: true, At: td.At, Limits: outcomes(checks, td.Results, false)}
	if err := s.attachEntries(ctx, d, checks); err != nil {
		return Decision{}, err
	}
	return d, nil
}

// attachEntries lists the entries of the sliding logs among checks, when
// the store can.
func (s *Service) attachEntries(ctx context.Context, d Decision, checks []check) error {
	reader, ok := s.opts.Store.(tokenlimit.LogReader)
	if !ok {
		return nil
	}
	if s.store.Remote {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.StoreTimeout)
		defer cancel()
	}
	for i, c := range checks {
		if c.item.Limit.Algorithm != tokenlimit.SlidingLog {
			continue
		}
		entries, err := reader.LogEntries(ctx, c.item.Key, c.item.Limit, d.At)
		if err != nil {
			return fmt.Errorf("service: inspect %s: %w", c.item.Key, err)
		}
		d.Limits[i].Entries = entries
	}
	return nil
}

// Reset makes whole the budgets req selects, all of them or only the limit
// named limit, and returns the keys it reset.
func (s *Service) Reset(ctx context.Context, req Request, limit string) ([]string, error) {
	p, err := s.planWith([]Request{req}, true, false)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, c := range append(p.enforced, p.shadow...) {
		if limit != "" && c.limit.Name != limit {
			continue
		}
		if err := s.opts.Store.Reset(ctx, c.item.Key, c.item.Limit.Algorithm); err != nil {
			return keys, fmt.Errorf("service: reset %s: %w", c.item.Key, err)
		}
		s.overLimit.forget([]check{c})
		keys = append(keys, c.item.Key)
	}
	return keys, nil
}
