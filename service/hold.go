package service

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
)

// This file holds what an in-process caller such as the LLM proxy needs
// beyond Reserve and Settle: what each limit counts (OpenAI's headers report
// requests and tokens apart), the limits a request selects before it is
// decided, whether an api key is known, and reservations held by the caller
// rather than registered by id.

// Unit is what a limit counts.
type Unit uint8

// The units.
const (
	// Requests: the limit's cost is a constant or a weight per request.
	Requests Unit = iota + 1
	// Tokens: the limit charges the request's own cost ("cost: request"),
	// such as the LLM tokens it consumes.
	Tokens
	// InFlight: a concurrency limit, requests in flight.
	InFlight
	// USD: a spend budget (unit: usd), charged each request's Spend in
	// micro-dollars.
	USD
)

// String returns "requests", "tokens", "in_flight" or "usd".
func (u Unit) String() string {
	switch u {
	case Requests:
		return "requests"
	case Tokens:
		return "tokens"
	case InFlight:
		return "in_flight"
	case USD:
		return "usd"
	}
	return fmt.Sprintf("Unit(%d)", uint8(u))
}

func unitOf(l *config.Limit) Unit {
	switch {
	case l.Concurrency:
		return InFlight
	case l.Cost.Spend:
		return USD
	case l.Cost.Constant > 0 || l.Cost.By != "":
		return Requests
	}
	return Tokens
}

// UnitOf returns what the limit named name counts in the configuration in
// force; ok is false when no limit has that name (a reload removed it).
func (s *Service) UnitOf(name string) (u Unit, ok bool) {
	cfg := s.rules.Load().cfg
	for i := range cfg.Limits {
		if cfg.Limits[i].Name == name {
			return unitOf(&cfg.Limits[i]), true
		}
	}
	return 0, false
}

// KnownAPIKey reports whether key is listed under api_keys in the
// configuration in force.
func (s *Service) KnownAPIKey(key string) bool {
	_, ok := s.rules.Load().cfg.APIKeys[key]
	return ok
}

// Selection is one limit a request selects, as it would be decided.
type Selection struct {
	// Name is the limit's name.
	Name string
	// Unit is what the limit counts.
	Unit Unit
	// Limit is the engine limit the request would be decided under: the
	// request's api key override and calendar window applied.
	Limit tokenlimit.Limit
	// Shadow limits never deny.
	Shadow bool
}

// Select returns the limits req selects, concurrency limits included, in
// configuration order, without deciding or charging anything. The proxy uses
// it to cap a default token estimate at the smallest token budget.
func (s *Service) Select(req Request) ([]Selection, error) {
	p, err := s.planFor([]Request{req}, true)
	if err != nil {
		return nil, err
	}
	out := make([]Selection, 0, len(p.enforced)+len(p.shadow))
	for _, c := range append(p.enforced, p.shadow...) {
		out = append(out, Selection{Name: c.limit.Name, Unit: unitOf(c.limit), Limit: c.item.Limit, Shadow: c.limit.Shadow})
	}
	return out, nil
}

// HoldOptions configures ReserveHold.
type HoldOptions struct {
	// ID names the reservation in the Decision (ReservationID); a random
	// one when empty. It is not registered anywhere: the Hold is the only
	// handle.
	ID string
	// Units, when not empty, keeps only the limits counting these units:
	// a request whose own cost is unknown (a passthrough the proxy cannot
	// count tokens of) reserves {Requests, InFlight}.
	Units []Unit
}

// Hold is an admitted reservation held by its caller, settled once with
// Settle. Unlike Reserve, ReserveHold keeps no record by id, so a process
// holding many requests in flight pays nothing per reservation it is not
// touching; the caller must settle it (an unsettled estimate simply stands,
// and a concurrency slot comes back when its lease ends).
type Hold struct {
	svc    *Service
	res    *tokenlimit.Reservation
	checks []check
}

// ReserveHold decides req like Reserve, charging its Cost as an estimate on
// every enforced limit it selects (and taking a slot of its concurrency
// limits), all or nothing. When admitted it returns a Hold to settle, on the
// store or, while the store fails, on the local fail-open budget; when denied
// or unavailable the Hold is nil, and settling a nil Hold does nothing.
func (s *Service) ReserveHold(ctx context.Context, req Request, opts HoldOptions) (Decision, *Hold, error) {
	start := time.Now()
	p, err := s.planFor([]Request{req}, true)
	if err != nil {
		return Decision{}, nil, err
	}
	if len(opts.Units) > 0 {
		p.enforced = slices.DeleteFunc(p.enforced, func(c check) bool { return !slices.Contains(opts.Units, unitOf(c.limit)) })
	}
	id := opts.ID
	if id == "" {
		id = newID()
	}
	d, res, err := s.reserveChecks(ctx, p.enforced, id, start)
	if err != nil || res == nil {
		return d, nil, err
	}
	return d, &Hold{svc: s, res: res, checks: p.enforced}, nil
}

// Settle tells what the held request really cost (limits in usd keep their
// charge; SettleSpend settles them too): actual is its own cost
// (such as the LLM tokens it used), turned into each limit's cost as in
// Check, so a limit counting requests keeps its charge, a token limit is
// charged actual, and a concurrency slot is released. The difference from
// the estimate is refunded or charged atomically. A second call returns an
// error matching tokenlimit.ErrSettled and changes nothing; a call that fails
// (the store is down) can be retried.
func (h *Hold) Settle(ctx context.Context, actual int64) error {
	if h == nil {
		return nil
	}
	if actual < 0 || actual > tokenlimit.MaxCost {
		return invalid("actual: must be between 0 and %d, got %d", int64(tokenlimit.MaxCost), actual)
	}
	if err := h.svc.settleChecks(ctx, h.res, h.checks, actual, nil); err != nil {
		return fmt.Errorf("service: settle: %w", err)
	}
	return nil
}
