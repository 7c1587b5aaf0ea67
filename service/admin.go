package service

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// LimitInfo describes one effective limit, for listings. The transports
// give it their own wire format.
type LimitInfo struct {
	Name string
	// Match is what the limit matches: descriptor name to pattern; empty
	// (never nil) for a limit that matches every request.
	Match map[string]string
	// Key lists the descriptors whose values make the key.
	Key       []string
	Algorithm tokenlimit.Algorithm
	// Concurrency marks a limit on requests in flight: a sliding log whose
	// window is the lease.
	Concurrency bool
	// Quota and Burst (0: none beyond the quota) are in the limit's units:
	// requests, tokens, or micro-dollars when Unit is "usd".
	Quota int64
	// PeriodMs is the limit's period in milliseconds.
	PeriodMs int64
	Burst    int64
	// Cost says what a request costs: "request" (1), a constant such as
	// "5", "by <descriptor> <weights> default <n>", or "spend".
	Cost     string
	Shadow   bool
	FailOpen bool
	// Calendar aligns the windows to calendar days or months;
	// config.NoCalendar for windows of the period.
	Calendar config.Calendar
	// Unit is "usd" for a spend budget, whose quota and burst are in
	// micro-dollars; empty otherwise.
	Unit string
	// Lease is the limit's lease terms and what this replica's leases of
	// it hold; nil for a limit that takes no leases.
	Lease *LeaseInfo
	// Store names the named store (stores: in the configuration) where
	// the limit's budgets live; "" for the main store.
	Store string
}

// LeaseInfo is a leased limit's terms and what this replica's leases of
// it hold now, over all its keys.
type LeaseInfo struct {
	// Size is the cost one lease takes, in the limit's units; TTL how long
	// a lease decides calls.
	Size int64
	TTL  time.Duration
	// Outstanding is how many leases this replica holds, Leased their
	// total size, and Unused what they can still admit (held back from
	// the other replicas until used or returned).
	Outstanding int
	Leased      int64
	Unused      int64
	// Taken, Denied and Failed count this replica's takes of a lease
	// since it started, by outcome: taken (the store charged a lease
	// whole), denied (less than a lease left), failed (the store failed).
	Taken, Denied, Failed int64
	// Returned and Stood are the unused parts of this replica's ended
	// leases since it started, in the limit's units: refunded to the
	// store, or left charged (the store failed until the lease's record
	// expired, or the replica stopped while it failed).
	Returned, Stood int64
}

// Limits lists the limits in force, in configuration order.
func (s *Service) Limits() []LimitInfo {
	cfg := s.rules.Load().cfg
	out := make([]LimitInfo, len(cfg.Limits))
	var leases map[string]resilient.LeaseStats
	for i, l := range cfg.Limits {
		match := map[string]string{}
		for k, v := range l.Match {
			match[k] = string(v)
		}
		out[i] = LimitInfo{
			Name: l.Name, Match: match, Key: l.Key, Algorithm: l.Limit.Algorithm, Concurrency: l.Concurrency,
			Quota: l.Limit.Quota, PeriodMs: l.Limit.Period.Milliseconds(), Burst: l.Limit.Burst,
			Cost: costString(l.Cost), Shadow: l.Shadow, FailOpen: l.FailOpen, Calendar: l.Calendar, Store: l.Store,
		}
		if l.Cost.Spend {
			out[i].Unit = USD.String()
		}
		if l.Lease.On() {
			if leases == nil {
				leases = s.fault.LeaseStats()
			}
			held := leases[l.Name]
			out[i].Lease = &LeaseInfo{Size: l.Lease.Size, TTL: l.Lease.TTL, Outstanding: held.Outstanding, Leased: held.Leased, Unused: held.Unused,
				Taken: held.Taken, Denied: held.Denied, Failed: held.Failed, Returned: held.Returned, Stood: held.Stood}
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
	case c.Class != config.NoClass:
		return c.Class.String()
	case c.Expr != nil:
		return "expr " + c.Expr.String()
	}
	return "request"
}

// Inspect reports the state of every limit req selects without charging
// anything (each is peeked with cost 0).
func (s *Service) Inspect(ctx context.Context, req Request) (Decision, error) {
	return s.inspect(ctx, req, false)
}

// InspectHere is Inspect as this replica decides: a leased limit (lease:)
// whose budget this replica holds a lease of is answered from its leases,
// with no store call, its Remaining an estimate as a leased call's is
// (what the store had left at this replica's last take plus what its
// leases hold); the other limits are read from the store. The LLM proxy
// sets its headers after a settlement so.
func (s *Service) InspectHere(ctx context.Context, req Request) (Decision, error) {
	return s.inspect(ctx, req, true)
}

func (s *Service) inspect(ctx context.Context, req Request, here bool) (Decision, error) {
	p, err := s.planWith([]Request{req}, nil, true, false)
	if err != nil {
		return Decision{}, err
	}
	checks := append(p.enforced, p.shadow...) // each of cost 0 (see costOf)
	if len(checks) == 0 {
		return Decision{Allowed: true, At: s.opts.Clock()}, nil
	}
	b := newStoreCall(checks, true)
	var a resilient.Answer
	if here {
		for i := range checks {
			b.policies[i].Lease = checks[i].limit.Lease
		}
		a, err = s.fault.Peek(ctx, b.items, b.policies, b.results)
	} else {
		a, err = s.fault.Decide(ctx, b.items, b.policies, b.results)
	}
	switch {
	case err != nil:
		return Decision{}, s.storeError(err)
	case a.Full: // no room to look at a budget it does not hold
		return Decision{}, fmt.Errorf("service: inspect: %w", tokenlimit.ErrStoreFull)
	case a.Source != resilient.FromStore && !(here && a.Source == resilient.FromLease):
		return Decision{}, fmt.Errorf("service: inspect: the store is failing")
	}
	d := Decision{Allowed: true, At: a.At, Limits: outcomes(checks, b.results, false)}
	if err := s.attachEntries(ctx, d, checks); err != nil {
		return Decision{}, err
	}
	return d, nil
}

// attachEntries lists the entries of the sliding logs among checks, when
// their stores can.
func (s *Service) attachEntries(ctx context.Context, d Decision, checks []check) error {
	for i, c := range checks {
		if c.item.Limit.Algorithm != tokenlimit.SlidingLog {
			continue
		}
		st, timeout := s.storeOf(c.limit)
		reader, ok := st.(tokenlimit.LogReader)
		if !ok {
			continue
		}
		ctx, cancel := ctx, context.CancelFunc(func() {})
		if tokenlimit.Describe(st).Remote {
			ctx, cancel = context.WithTimeout(ctx, timeout)
		}
		entries, err := reader.LogEntries(ctx, c.item.Key, c.item.Limit, d.At)
		cancel()
		if err != nil {
			return fmt.Errorf("service: inspect %s: %w", c.item.Key, err)
		}
		d.Limits[i].Entries = entries
	}
	return nil
}

// storeOf returns the store where l's budgets live and its timeout.
func (s *Service) storeOf(l *config.Limit) (tokenlimit.Store, time.Duration) {
	if ns, ok := s.opts.Stores[l.Store]; ok && l.Store != "" {
		return ns.Store, cmp.Or(ns.Timeout, s.opts.StoreTimeout)
	}
	return s.opts.Store, s.opts.StoreTimeout
}

// Reset makes whole the budgets req selects, all of them or only the limit
// named limit, and returns the keys it reset.
func (s *Service) Reset(ctx context.Context, req Request, limit string) ([]string, error) {
	p, err := s.planWith([]Request{req}, nil, true, false)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, c := range append(p.enforced, p.shadow...) {
		if limit != "" && c.limit.Name != limit {
			continue
		}
		st, _ := s.storeOf(c.limit)
		if err := st.Reset(ctx, c.item.Key, c.item.Limit.Algorithm); err != nil {
			return keys, fmt.Errorf("service: reset %s: %w", c.item.Key, err)
		}
		s.overLimit.forget([]check{c})
		keys = append(keys, c.item.Key)
	}
	return keys, nil
}
