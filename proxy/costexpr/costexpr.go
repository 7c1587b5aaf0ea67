// Package costexpr compiles the cost expressions of tokenlimit's
// configuration (cost: {expr: "input_tokens + 4 * output_tokens"}) with CEL
// (cel.dev/cel-go). Pass Compile as config.Options.Compile.
//
// An expression's variables are the call's token classes, integers:
// input_tokens (every input token, cached or not), cached_input_tokens (the
// part read from the prompt cache), cache_write_tokens (the part written to
// it), output_tokens, reasoning_tokens (the part of the output spent
// reasoning) and total_tokens (input plus output); and the strings model and
// route and the map descriptors (every descriptor of the request). It is
// type-checked to return an int, its worst-case cost is bounded at compile
// time (MaxCost, in CEL's cost units) and again at run time.
//
// It lives in the proxy module, which needs it, so that the library's
// module does not depend on CEL.
package costexpr

import (
	"errors"
	"fmt"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"

	"github.com/tokenlimit/tokenlimit/config"
)

// MaxCost bounds an expression's cost in CEL's cost units (about one per
// operation, more for string operations in proportion to their length),
// both as estimated at compile time for descriptors of MaxStringSize
// bytes and counted at run time.
const MaxCost = 1000

// MaxStringSize is the longest model, route or descriptor value the
// compile-time estimate assumes, in bytes (the service's default
// MaxDescriptorLength is 256; longer values are bounded by the run-time
// count alone).
const MaxStringSize = 256

// maxDescriptors is the number of descriptors the compile-time estimate
// assumes a request has.
const maxDescriptors = 64

// The variables' names.
const (
	varInput      = "input_tokens"
	varCached     = "cached_input_tokens"
	varCacheWrite = "cache_write_tokens"
	varOutput     = "output_tokens"
	varReasoning  = "reasoning_tokens"
	varTotal      = "total_tokens"
	varModel      = "model"
	varRoute      = "route"
	varDesc       = "descriptors"
)

// newEnv returns the CEL environment of cost expressions. Each
// expression gets its own (compiling one takes under a millisecond, at
// load only), so that compilations running at once share no state.
func newEnv() (*cel.Env, error) {
	opts := []cel.EnvOption{cel.Variable(varModel, cel.StringType), cel.Variable(varRoute, cel.StringType),
		cel.Variable(varDesc, cel.MapType(cel.StringType, cel.StringType))}
	for _, name := range []string{varInput, varCached, varCacheWrite, varOutput, varReasoning, varTotal} {
		opts = append(opts, cel.Variable(name, cel.IntType))
	}
	return cel.NewEnv(opts...)
}

// Compile compiles src, a config.Compiler: an error names the column of
// the expression it is about (a *config.ExprError).
func Compile(src string) (config.Expr, error) {
	env, err := newEnv()
	if err != nil {
		return nil, fmt.Errorf("costexpr: the environment does not build: %w", err)
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		first := iss.Errors()[0]
		return nil, &config.ExprError{Column: first.Location.Column() + 1, Reason: first.Message}
	}
	if !ast.OutputType().IsExactType(cel.IntType) {
		return nil, &config.ExprError{Column: 1, Reason: fmt.Sprintf("want an int (a whole number of tokens), got %s: use int(...) or whole numbers", ast.OutputType())}
	}
	est, err := env.EstimateCost(ast, sizes{})
	if err != nil {
		return nil, &config.ExprError{Column: 1, Reason: fmt.Sprintf("its cost cannot be estimated: %v", err)}
	}
	if est.Max > MaxCost {
		return nil, &config.ExprError{Column: 1, Reason: fmt.Sprintf("its cost may reach %d, above the limit of %d (CEL's cost units, for strings of %d bytes)", est.Max, MaxCost, MaxStringSize)}
	}
	prg, err := env.Program(ast, cel.CostLimit(MaxCost), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, &config.ExprError{Column: 1, Reason: err.Error()}
	}
	return &expr{src: src, prg: prg}, nil
}

// sizes tells the cost estimate how long strings and how large maps from
// the request may be.
type sizes struct{}

func (sizes) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	switch {
	case len(n.Path()) == 0:
		return nil
	case n.Type().IsExactType(cel.StringType):
		return &cost.SizeEstimate{Min: 0, Max: MaxStringSize}
	case n.Path()[0] == varDesc && len(n.Path()) == 1:
		return &cost.SizeEstimate{Min: 0, Max: maxDescriptors}
	}
	return nil
}

func (sizes) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

// expr is a compiled expression.
type expr struct {
	src string
	prg cel.Program
}

func (e *expr) String() string { return e.src }

// Eval implements config.Expr.
func (e *expr) Eval(u *config.Usage, desc map[string]string) (int64, error) {
	out, _, err := e.prg.Eval(&activation{u: u, desc: desc})
	if err != nil {
		return 0, err
	}
	v, ok := out.(types.Int)
	if !ok {
		return 0, errors.New("not an int") // the type check makes this unreachable
	}
	return int64(v), nil
}

// activation resolves the variables of one call without building a map.
type activation struct {
	u    *config.Usage
	desc map[string]string
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case varInput:
		return types.Int(a.u.Input), true
	case varCached:
		return types.Int(a.u.Cached), true
	case varCacheWrite:
		return types.Int(a.u.CacheWrite), true
	case varOutput:
		return types.Int(a.u.Output), true
	case varReasoning:
		return types.Int(a.u.Reasoning), true
	case varTotal:
		return types.Int(a.u.Total()), true
	case varModel:
		return types.String(a.desc["model"]), true
	case varRoute:
		return types.String(a.desc["route"]), true
	case varDesc:
		return types.NewStringStringMap(types.DefaultTypeAdapter, a.desc), true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }
