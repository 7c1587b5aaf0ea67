package service

import (
	"context"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
)

// This file holds what spend budgets (limits with unit: usd) need beyond
// tokens: the configured prices, and settling a held request's spend.

// PriceOf returns the price of model in the configuration in force and the
// prices entry that gave it (see config.Config.PriceOf); ok is false when
// no entry prices it.
func (s *Service) PriceOf(model string) (entry string, p config.Price, ok bool) {
	e, p, ok := s.rules.Load().cfg.PriceOf(model)
	return string(e), p, ok
}

// PriceEntries returns the entries of the prices table in force, for
// bounded metric labels.
func (s *Service) PriceEntries() []string {
	prices := s.rules.Load().cfg.Prices
	out := make([]string, 0, len(prices))
	for p := range prices {
		out = append(out, string(p))
	}
	return out
}

// SettleSpend is Settle with the request's real spend too: actual is its
// own cost and spend its price in micro-dollars, which limits in usd are
// settled to (Settle keeps what they were charged). The same once-only
// rules apply.
func (s *Service) SettleSpend(ctx context.Context, id string, actual, spend int64) (tokenlimit.SettleStatus, error) {
	if spend < 0 || spend > tokenlimit.MaxCost {
		return 0, invalid("spend: must be between 0 and %d micro-dollars, got %d", int64(tokenlimit.MaxCost), spend)
	}
	return s.settle(ctx, nil, id, actual, &spend, nil)
}
