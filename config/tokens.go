package config

import (
	"errors"
	"fmt"

	"github.com/tokenlimit/tokenlimit"
)

// This file reads costs counted in token classes: the named shorthands
// (cost: output_tokens) and expressions (cost: {expr: "..."}), which the
// package only parses: an Options.Compile compiles them (the proxy module's
// costexpr package, with CEL), so that the library's module does not depend
// on an expression language.

// Usage is what an LLM call consumed, or is estimated to, by token class.
// Classes are parts, not extra tokens: Input counts every input token,
// Cached (read from the provider's prompt cache) and CacheWrite (written
// to it) included; Output counts every output token, Reasoning included.
type Usage struct {
	Input, Cached, CacheWrite, Output, Reasoning int64
}

// Uncached returns the input tokens not read from the prompt cache,
// Input - Cached (cache writes are uncached reads).
func (u *Usage) Uncached() int64 { return u.Input - u.Cached }

// Total returns Input + Output.
func (u *Usage) Total() int64 { return u.Input + u.Output }

// Clamped returns u with every class within 0..tokenlimit.MaxCost and each
// part within its whole: cached reads at most the input, cache writes at
// most what is left of it, reasoning at most the output. It reports
// whether anything changed (the upstream reported a negative, absurd or
// inconsistent usage).
func (u Usage) Clamped() (Usage, bool) {
	in := u
	bound := func(v int64) int64 { return min(max(v, 0), tokenlimit.MaxCost) }
	u.Input, u.Output = bound(u.Input), bound(u.Output)
	u.Cached = min(bound(u.Cached), u.Input)
	u.CacheWrite = min(bound(u.CacheWrite), u.Input-u.Cached)
	u.Reasoning = min(bound(u.Reasoning), u.Output)
	return u, u != in
}

// TokenClass is a cost given by name: one class of a call's tokens.
type TokenClass uint8

// The token classes a cost can name.
const (
	// NoClass: the cost is not a class.
	NoClass TokenClass = iota
	// InputTokens: every input token, cached or not.
	InputTokens
	// UncachedInputTokens: input tokens not read from the prompt cache
	// (Anthropic's input-tokens-per-minute limits for current models).
	UncachedInputTokens
	// OutputTokens: every output token, reasoning included.
	OutputTokens
	// TotalTokens: input plus output tokens.
	TotalTokens
)

var classNames = [...]string{InputTokens: "input_tokens", UncachedInputTokens: "uncached_input_tokens", OutputTokens: "output_tokens", TotalTokens: "total_tokens"}

// String returns the class's name in configuration files, such as
// "output_tokens".
func (c TokenClass) String() string {
	if c > NoClass && int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("TokenClass(%d)", uint8(c))
}

// classOf returns the class named s, if s names one.
func classOf(s string) (TokenClass, bool) {
	for c := InputTokens; int(c) < len(classNames); c++ {
		if classNames[c] == s {
			return c, true
		}
	}
	return NoClass, false
}

// Of returns the class's count in u.
func (c TokenClass) Of(u *Usage) int64 {
	switch c {
	case InputTokens:
		return u.Input
	case UncachedInputTokens:
		return u.Uncached()
	case OutputTokens:
		return u.Output
	}
	return u.Total()
}

// Expr is a compiled cost expression.
type Expr interface {
	// Eval returns the cost of a call that consumed u, with descriptors
	// desc (model and route among them), or an error (the expression's cost
	// limit, an overflow, a missing descriptor). It may be negative.
	Eval(u *Usage, desc map[string]string) (int64, error)
	// String returns the expression as written.
	String() string
}

// Compiler compiles a cost expression, or returns an error, an
// *ExprError when it can say at which column.
type Compiler func(expr string) (Expr, error)

// ExprError is an error at a column of an expression (1 for its first
// character), which the configuration's error turns into the file's
// line and column.
type ExprError struct {
	Column int
	Reason string
}

func (e *ExprError) Error() string { return fmt.Sprintf("column %d: %s", e.Column, e.Reason) }

// Options configures ParseWith and LoadWith.
type Options struct {
	// Compile compiles cost expressions; nil makes them a configuration
	// error (the library alone does not evaluate them).
	Compile Compiler
}

// ErrNegativeCost is the error of an expression that returned a negative
// cost: the request is charged 0.
var ErrNegativeCost = errors.New("the cost expression returned a negative cost")

// classCost returns the cost of a request under a cost in token classes
// (PerClass): its class, or its expression's value, within
// 0..tokenlimit.MaxCost. An expression that fails or returns a negative
// cost charges 0 and returns the error. A request that gives no usage
// counts its own cost as uncached input tokens.
func (c Cost) classCost(desc map[string]string, requestCost int64, u *Usage) (int64, error) {
	if u == nil {
		u = &Usage{Input: requestCost}
	}
	if c.Class != NoClass {
		return min(max(c.Class.Of(u), 0), tokenlimit.MaxCost), nil
	}
	v, err := c.Expr.Eval(u, desc)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s: %w", c.Expr, err)
	case v < 0:
		return 0, fmt.Errorf("%s = %d: %w", c.Expr, v, ErrNegativeCost)
	}
	return min(v, tokenlimit.MaxCost), nil
}
