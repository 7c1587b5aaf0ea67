package service

import (
	"fmt"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
)

// This file holds what an in-process caller such as the LLM proxy needs
// beyond Reserve and Settle: what each limit counts (OpenAI's headers report
// requests and tokens apart), the limits a request selects before it is
// decided, and whether an api key is known.

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
	// InputTokens: the limit charges the request's input tokens, every
	// one or the uncached ones (cost: input_tokens, uncached_input_tokens).
	InputTokens
	// OutputTokens: the limit charges the request's output tokens (cost:
	// output_tokens).
	OutputTokens
)

// String returns "requests", "tokens", "in_flight", "usd",
// "input_tokens" or "output_tokens".
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
	case InputTokens:
		return "input_tokens"
	case OutputTokens:
		return "output_tokens"
	}
	return fmt.Sprintf("Unit(%d)", uint8(u))
}

// IsTokens reports whether the unit counts LLM tokens: Tokens,
// InputTokens or OutputTokens.
func (u Unit) IsTokens() bool { return u == Tokens || u == InputTokens || u == OutputTokens }

func unitOf(l *config.Limit) Unit {
	switch {
	case l.Concurrency:
		return InFlight
	case l.Cost.Spend:
		return USD
	case l.Cost.Constant > 0 || l.Cost.By != "":
		return Requests
	case l.Cost.Class == config.InputTokens || l.Cost.Class == config.UncachedInputTokens:
		return InputTokens
	case l.Cost.Class == config.OutputTokens:
		return OutputTokens
	}
	return Tokens
}

// stopsStreams reports whether l stops a stream it cannot pay for more of:
// a budget whose on_exhaust is stop in tokens (total or output, or an
// expression of them) or usd. A budget of input tokens has nothing to
// stop: a stream's output costs it nothing.
func stopsStreams(l *config.Limit) bool {
	u := unitOf(l)
	return (u == Tokens || u == OutputTokens || u == USD) && l.OnExhaust == config.Stop
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
// configuration in force, comparing digests (see Authenticate).
func (s *Service) KnownAPIKey(key string) bool {
	return s.rules.Load().listsKey(key)
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
