package proxy

import (
	"fmt"
	"net/http"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/ratelimitheader"
	"github.com/tokenlimit/tokenlimit/service"
)

// This file prices calls for spend budgets (limits with unit: usd): a call
// reserves the price of its estimate and settles to the price of the tokens
// it used, in whole micro-dollars, by the configuration's prices table.

// bill is what a call consumed, in the token classes providers report and
// price. Its parts never exceed their wholes (see clamped).
type bill struct {
	// Input is every input token, cached or not; Cached is the part read
	// from the provider's prompt cache, CacheWrite the part written to it
	// (Anthropic's cache_creation_input_tokens).
	Input, Cached, CacheWrite int64
	// Output is every output token; Reasoning is the part spent reasoning.
	Output, Reasoning int64
}

// tokens returns the bill's tokens, input and output, at most
// tokenlimit.MaxCost.
func (b bill) tokens() int64 {
	return min(addSat(b.Input, b.Output), tokenlimit.MaxCost)
}

// uncached returns the input tokens neither read from nor written to the
// prompt cache.
func (b bill) uncached() int64 { return b.Input - b.Cached - b.CacheWrite }

// clamped returns b with negative classes at 0 and parts within their
// wholes: cached reads at most the input, cache writes at most what is left
// of it, reasoning at most the output. An upstream that reports cached >
// input is believed about the input.
func (b bill) clamped() bill {
	u, _ := b.usage().Clamped()
	return bill(u)
}

// usage returns the bill as the service's usage, the variables of cost
// expressions.
func (b bill) usage() config.Usage { return config.Usage(b) }

// estimateBill is what the estimate reserves: the prompt at the input
// price, the reply's maximum at the output price.
func estimateBill(e Estimate) bill { return bill{Input: e.Prompt, Output: e.Completion} }

// price returns the bill's price for c's model in micro-dollars, at most
// tokenlimit.MaxCost, and whether the model has a price.
func (p *Proxy) price(c *call, b bill) (int64, bool) {
	_, price, ok := p.svc.PriceOf(c.est.Model)
	if !ok {
		return 0, false
	}
	return min(price.Of(b.uncached(), b.Cached, b.CacheWrite, b.Output), tokenlimit.MaxCost), true
}

// priceEstimate sets the spend c reserves. A call of a model without a
// price that selects an enforced limit in usd is refused with 400 (an
// operator who wants such calls served prices them with a "*" entry); false
// then.
func (p *Proxy) priceEstimate(w http.ResponseWriter, c *call) bool {
	if spend, ok := p.price(c, estimateBill(c.est)); ok {
		c.req.Spend = spend
		return true
	}
	sel, err := p.svc.Select(service.Request{Descriptors: c.req.Descriptors, Cost: 1})
	if err != nil {
		return true // ReserveHold reports it
	}
	for _, s := range sel {
		if s.Unit == service.USD && !s.Shadow {
			writeError(w, c.dialect, http.StatusBadRequest, "invalid_request_error", "model_not_priced",
				fmt.Sprintf("The model %q has no price in this proxy's prices table, and the limit %s counts US dollars.", c.est.Model, s.Name))
			return false
		}
	}
	return true
}

// usdHeaders sets x-ratelimit-{limit,remaining,reset}-usd from the
// tightest enforced limit in usd: amounts in decimal dollars ("5.00",
// "4.99875"), the reset as a Go duration rounded up to the millisecond.
func (p *Proxy) usdHeaders(h http.Header, d service.Decision) {
	t, ok := p.tightestOf(d, func(u service.Unit) bool { return u == service.USD })
	if !ok {
		return
	}
	h.Set("X-Ratelimit-Limit-Usd", config.FormatUSD(t.Limit))
	h.Set("X-Ratelimit-Remaining-Usd", config.FormatUSD(t.Remaining))
	h.Set("X-Ratelimit-Reset-Usd", ratelimitheader.CeilMillis(t.ResetAfter).String())
}
