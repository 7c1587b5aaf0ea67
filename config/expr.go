package config

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tokenlimit/tokenlimit"
)

// rawExprCost is a cost as an expression over the request's token classes,
// model, route and descriptors.
type rawExprCost struct {
	Expr string `yaml:"expr"`
}

// exprCost reads {expr: "..."}: compiled by b.compile, whose errors are
// placed at the expression's own line and column in the file, and refused
// if it returns a negative value at one of the corners of the usage
// (negativeCorner).
func (b *builder) exprCost(path []any, n *yaml.Node) Cost {
	var raw rawExprCost
	b.decode(path, n, &raw)
	epath := at(path, "expr")
	switch {
	case b.isWrong(epath):
		return Cost{}
	case strings.TrimSpace(raw.Expr) == "":
		b.fail(epath, "want an expression such as \"input_tokens + 4 * output_tokens\"")
		return Cost{}
	case b.compile == nil:
		b.fail(epath, "cost expressions need a build with an expression compiler (tokenlimit's own, or config.Options.Compile)")
		return Cost{}
	}
	e, err := b.compile(raw.Expr)
	if err != nil {
		b.exprFail(epath, err)
		return Cost{}
	}
	if u, v, ok := negativeCorner(e); ok {
		b.exprFail(epath, &ExprError{Column: 1, Reason: fmt.Sprintf("%q can return a negative cost: %d for input_tokens %d, cached_input_tokens %d, cache_write_tokens %d, output_tokens %d, reasoning_tokens %d",
			raw.Expr, v, u.Input, u.Cached, u.CacheWrite, u.Output, u.Reasoning)})
		return Cost{}
	}
	return Cost{Expr: e}
}

// exprFail records a compile error at the expression's line and, when the
// error names a column of a one-line expression, at that column of the
// file: file:line:col: path: reason.
func (b *builder) exprFail(path []any, err error) {
	var ee *ExprError
	n, _ := b.locate(path)
	if !errors.As(err, &ee) || b.source == "" || strings.Contains(n.Value, "\n") {
		b.fail(path, "%v", err)
		return
	}
	col := n.Column + ee.Column - 1
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		col++ // the opening quote
	}
	b.errs = append(b.errs, lineError{line: n.Line, msg: fmt.Sprintf("%s:%d:%d: %s: %s", b.source, n.Line, col, pathString(path), ee.Reason)})
}

// negativeCorner evaluates e at the corners of a consistent usage (each
// class 0, 1, 1,000 or tokenlimit.MaxCost, each part none or all of its
// whole) with no descriptors, and returns the first usage at which it is
// negative. Evaluations that fail (a missing descriptor, an overflow) are
// left to run time, where they charge 0 and are counted. This catches
// input_tokens - output_tokens, not a negative branch that only some
// model or descriptor takes.
func negativeCorner(e Expr) (Usage, int64, bool) {
	counts := [...]int64{0, 1, 1000, tokenlimit.MaxCost}
	desc := map[string]string{}
	for _, in := range counts {
		for _, out := range counts {
			for _, cached := range [...]int64{0, in} {
				for _, write := range [...]int64{0, in - cached} {
					for _, reasoning := range [...]int64{0, out} {
						u := Usage{Input: in, Cached: cached, CacheWrite: write, Output: out, Reasoning: reasoning}
						if v, err := e.Eval(&u, desc); err == nil && v < 0 {
							return u, v, true
						}
					}
				}
			}
		}
	}
	return Usage{}, 0, false
}
