package config

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tokenlimit/tokenlimit"
)

// This file reads spend budgets: limits with unit: usd, whose amounts are
// decimal US dollars, and the prices table that turns tokens into dollars.
// Every amount becomes a whole number of micro-dollars (1 USD = 1,000,000),
// so the decision path stays in integers.

// MicroPerUSD is the number of micro-dollars in one US dollar.
const MicroPerUSD = 1_000_000

// MaxPrice bounds a price, in micro-dollars per million tokens: $1,000,000
// per million tokens.
const MaxPrice = 1_000_000 * MicroPerUSD

// Price is what a model's tokens cost, each in micro-dollars per million
// tokens ($2.50 per million tokens is 2,500,000). CachedInput prices input
// tokens read from the provider's prompt cache, CacheWrite input tokens
// written to it (Anthropic's cache_creation_input_tokens); each equals
// Input when the configuration gives none.
type Price struct {
	Input, CachedInput, CacheWrite, Output int64
}

// Of returns the price of uncached input, cachedInput, cacheWrite and
// output tokens in micro-dollars, rounded up to a whole micro-dollar, and
// at most tokenlimit.MaxCost + 1 (a price that large can never be
// admitted). Negative counts count as 0. It is exact: no float is involved.
func (p Price) Of(input, cachedInput, cacheWrite, output int64) int64 {
	var hi, lo uint64
	for _, t := range [...]struct{ n, price int64 }{{input, p.Input}, {cachedInput, p.CachedInput}, {cacheWrite, p.CacheWrite}, {output, p.Output}} {
		if t.n <= 0 || t.price <= 0 {
			continue
		}
		h, l := bits.Mul64(uint64(t.n), uint64(t.price))
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi += h + carry
	}
	const million = 1_000_000
	if hi >= million {
		return tokenlimit.MaxCost + 1
	}
	q, r := bits.Div64(hi, lo, million)
	if r > 0 {
		q++
	}
	return int64(min(q, uint64(tokenlimit.MaxCost+1)))
}

// PriceOf returns the price of model and the entry of Prices that gave it:
// the entry naming the model exactly, else the longest pattern ending in
// "*" that matches it ("*" alone last). ok is false when none does.
func (c *Config) PriceOf(model string) (entry Pattern, p Price, ok bool) {
	if p, ok := c.Prices[Pattern(model)]; ok {
		return Pattern(model), p, true
	}
	for pat, price := range c.Prices {
		if strings.HasSuffix(string(pat), "*") && pat.Matches(model) && (!ok || len(pat) > len(entry) || (len(pat) == len(entry) && pat < entry)) {
			entry, p, ok = pat, price, true
		}
	}
	return entry, p, ok
}

// FormatUSD writes micro-dollars as decimal dollars with at least two
// decimals and no trailing zeros beyond them: 5000000 is "5.00", 1234567
// "1.234567", -1500 "-0.0015".
func FormatUSD(micro int64) string {
	sign := ""
	u := uint64(micro)
	if micro < 0 {
		sign, u = "-", -u
	}
	frac := strings.TrimRight(fmt.Sprintf("%06d", u%MicroPerUSD), "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return sign + strconv.FormatUint(u/MicroPerUSD, 10) + "." + frac
}

// ParseUSD reads a non-negative decimal amount of dollars with at most six
// decimals ("5", "5.00", "0.000125") as micro-dollars, at most max.
func ParseUSD(s string, max int64) (int64, error) {
	whole, frac, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(s), "$"), ".")
	bad := fmt.Errorf("want decimal US dollars with at most 6 decimals, such as 5.00, got %q", s)
	if whole == "" && frac == "" || len(frac) > 6 || strings.ContainsAny(whole, "+-") || strings.ContainsAny(frac, "+-") {
		return 0, bad
	}
	if whole == "" {
		whole = "0"
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, bad
	}
	f := int64(0)
	if frac != "" {
		if f, err = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64); err != nil {
			return 0, bad
		}
	}
	if w > max/MicroPerUSD || w*MicroPerUSD+f > max {
		return 0, fmt.Errorf("at most %s dollars, got %q", FormatUSD(max), s)
	}
	return w*MicroPerUSD + f, nil
}

// unit reads a limit's unit: absent (what its cost says) or usd.
func (b *builder) unit(path []any, r *rawLimit) bool {
	switch r.Unit {
	case "":
		return false
	case "usd":
		if r.Algorithm == "concurrency" {
			b.fail(at(path, "unit"), "a concurrency limit counts requests in flight, not usd")
		}
		if r.Cost.Kind != 0 {
			b.fail(at(path, "cost"), "a limit in usd is charged each call's price; it takes no cost")
		}
		return true
	}
	b.fail(at(path, "unit"), "want usd (a spend budget in US dollars) or no unit, got %q", r.Unit)
	return false
}

// rawParams gathers an algorithm's parameters; for a limit in usd, its
// amounts are decimal dollars, turned into micro-dollars.
func (b *builder) rawParams(path []any, usd bool, limit string, capacity *yaml.Node, refill, rate string, maxBurst *yaml.Node) rawParams {
	p := rawParams{limit: limit, refill: refill, rate: rate}
	p.capacity, _ = b.amount(at(path, "capacity"), capacity, usd)
	if n, given := b.amount(at(path, "max_burst"), maxBurst, usd); given {
		p.maxBurst = &n
	}
	if usd {
		p.limit = b.usdRate(at(path, "limit"), limit)
		p.refill = b.usdRate(at(path, "refill"), refill)
		p.rate = b.usdRate(at(path, "rate"), rate)
	}
	return p
}

// amount reads a whole number, or for usd decimal dollars as
// micro-dollars; given is false when the field is absent.
func (b *builder) amount(path []any, n *yaml.Node, usd bool) (v int64, given bool) {
	if n.Kind == 0 {
		return 0, false
	}
	if n.Kind != yaml.ScalarNode {
		b.wrong(path, "want a whole number, got %s", valueWords(n))
		return 0, true
	}
	if usd {
		v, err := ParseUSD(n.Value, tokenlimit.MaxCost)
		if err != nil {
			b.wrong(path, "%v", err)
		}
		return v, true
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		b.wrong(path, "want a whole number, got %q", n.Value)
	}
	return v, true
}

// usdRate rewrites "D/period" in decimal dollars as "M/period" in
// micro-dollars; "" stays "".
func (b *builder) usdRate(path []any, s string) string {
	if s == "" {
		return ""
	}
	num, per, ok := strings.Cut(s, "/")
	if !ok {
		return s // ParseRate reports it
	}
	v, err := ParseUSD(num, tokenlimit.MaxCost)
	if err == nil && v == 0 {
		err = fmt.Errorf("want a positive amount of dollars per period, such as 5.00/day, got %q", s)
	}
	if err != nil {
		b.wrong(path, "%v", err) // given, but wrong
		return ""
	}
	return strconv.FormatInt(v, 10) + "/" + per
}

// rawPrice is a prices entry as written: dollars per million tokens.
type rawPrice struct {
	Input       yaml.Node `yaml:"input"`
	CachedInput yaml.Node `yaml:"cached_input"`
	CacheWrite  yaml.Node `yaml:"cache_write"`
	Output      yaml.Node `yaml:"output"`
}

// prices reads the prices table: each model's (or pattern's) input and
// output price, and cached input's and cache writes' if given, in dollars
// per million tokens.
func (b *builder) prices(raw map[string]rawPrice) map[Pattern]Price {
	out := make(map[Pattern]Price, len(raw))
	for _, model := range b.keysInOrder([]any{"prices"}) {
		path := []any{"prices", model}
		r := raw[model]
		if model == "" || strings.Count(model, "*") > 1 || (strings.Contains(model, "*") && !strings.HasSuffix(model, "*")) {
			b.fail(path, "want a model name, or a prefix ending in * such as claude-sonnet-4*, got %q", model)
		}
		p := Price{Input: b.price(at(path, "input"), &r.Input), Output: b.price(at(path, "output"), &r.Output)}
		p.CachedInput, p.CacheWrite = p.Input, p.Input
		if r.CachedInput.Kind != 0 {
			p.CachedInput = b.price(at(path, "cached_input"), &r.CachedInput)
		}
		if r.CacheWrite.Kind != 0 {
			p.CacheWrite = b.price(at(path, "cache_write"), &r.CacheWrite)
		}
		out[Pattern(model)] = p
	}
	return out
}

// price reads one price in dollars per million tokens as micro-dollars per
// million tokens.
func (b *builder) price(path []any, n *yaml.Node) int64 {
	switch {
	case n.Kind == 0:
		b.fail(path, "missing: give the price in US dollars per million tokens, such as 2.50")
		return 0
	case n.Kind != yaml.ScalarNode:
		b.fail(path, "want US dollars per million tokens, such as 2.50, got %s", valueWords(n))
		return 0
	case strings.HasPrefix(strings.TrimSpace(n.Value), "-"):
		b.fail(path, "a price must not be negative, got %s", n.Value)
		return 0
	}
	v, err := ParseUSD(n.Value, MaxPrice)
	if err != nil {
		b.fail(path, "US dollars per million tokens: %v", err)
	}
	return v
}
