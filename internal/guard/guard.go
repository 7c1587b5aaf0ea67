// Package guard is the decision that tokenlimit's middleware (httplimit) and
// gRPC interceptor (grpclimit) share: a key and a cost taken from a request
// by the caller's functions, a missing key replaced by a default or refused
// naming what is missing, one charge on the Limiter, and a store failure
// passed through (fail open) or refused (fail closed).
package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// KeyError reports that a request carries no usable key: Field names what
// is missing or wrong as the client wrote it (a header, a metadata key),
// Reason why. The middleware and the interceptor export it under their own
// names.
type KeyError struct {
	Field  string
	Reason string
}

// Error returns "<field>: <reason>".
func (e *KeyError) Error() string { return e.Field + ": " + e.Reason }

// Guard decides requests under one limit. It is immutable after New and
// safe for concurrent use.
type Guard struct {
	Limiter    *tokenlimit.Limiter
	Limit      tokenlimit.Limit
	Name       string
	DefaultKey string
	FailClosed bool
	Log        *slog.Logger
	// Window is Limit.Window(), for RateLimit-Policy.
	Window time.Duration
}

// New validates the parts of a guard; pkg prefixes its errors.
func New(pkg string, l *tokenlimit.Limiter, limit tokenlimit.Limit, g Guard) (*Guard, error) {
	if l == nil {
		return nil, errors.New(pkg + ": New: limiter is nil")
	}
	if err := limit.Validate(); err != nil {
		return nil, fmt.Errorf("%s: New: limit: %w", pkg, err)
	}
	if g.Name == "" {
		g.Name = "default"
	}
	if g.Log == nil {
		g.Log = slog.Default()
	}
	if g.DefaultKey != "" {
		if err := storekit.ValidateKey(g.DefaultKey, limit.Algorithm); err != nil {
			return nil, fmt.Errorf("%s: New: DefaultKey: %w", pkg, err)
		}
	}
	g.Limiter, g.Limit, g.Window = l, limit, limit.Window()
	return &g, nil
}

// Verdict is what to do with a request.
type Verdict uint8

const (
	// Pass: the store failed and the limit fails open; call the handler
	// unchanged, with no rate-limit headers.
	Pass Verdict = iota + 1
	// Allow: charged; call the handler with the rate-limit headers.
	Allow
	// Deny: over the limit; answer 429 / RESOURCE_EXHAUSTED.
	Deny
	// Invalid: a bad or missing key or cost; answer 400 / INVALID_ARGUMENT
	// naming Field.
	Invalid
	// Unavailable: the store failed and the limit fails closed; answer 503
	// / UNAVAILABLE.
	Unavailable
)

// Outcome is a decision: its verdict, the key and cost charged, the
// engine's result, and for Invalid the field at fault and why.
type Outcome struct {
	Verdict Verdict
	Key     string
	Cost    int64
	Result  tokenlimit.Result
	Field   string
	Reason  string
}

// Decide charges cost to key, the values (and errors) the caller's
// functions returned. A key error that is a *KeyError, or an empty key,
// takes DefaultKey if there is one; other key and cost errors are Invalid,
// naming "key" or "cost" unless they are a *KeyError or a
// *tokenlimit.FieldError naming their own field.
func (g *Guard) Decide(ctx context.Context, key string, keyErr error, cost int64, costErr error) Outcome {
	var ke *KeyError
	if (key == "" && keyErr == nil) || errors.As(keyErr, &ke) {
		if g.DefaultKey == "" {
			if ke == nil {
				ke = &KeyError{Field: "key", Reason: "the request carries no key"}
			}
			return Outcome{Verdict: Invalid, Field: ke.Field, Reason: ke.Reason}
		}
		key, keyErr = g.DefaultKey, nil
	}
	if keyErr != nil {
		return invalid("key", keyErr)
	}
	if costErr != nil {
		return invalid("cost", costErr)
	}
	r, err := g.Limiter.AllowN(ctx, key, g.Limit, cost)
	switch {
	case errors.Is(err, tokenlimit.ErrInvalid):
		return invalid("key", err)
	case err != nil:
		g.Log.WarnContext(ctx, "rate-limit store failed", "limit", g.Name, "fail_closed", g.FailClosed, "error", err)
		if g.FailClosed {
			return Outcome{Verdict: Unavailable, Key: key, Cost: cost}
		}
		return Outcome{Verdict: Pass, Key: key, Cost: cost}
	case !r.Allowed:
		return Outcome{Verdict: Deny, Key: key, Cost: cost, Result: r}
	}
	return Outcome{Verdict: Allow, Key: key, Cost: cost, Result: r}
}

// invalid names the field of err: its own if it is a *KeyError or a
// *tokenlimit.FieldError, else field.
func invalid(field string, err error) Outcome {
	var ke *KeyError
	var fe *tokenlimit.FieldError
	switch {
	case errors.As(err, &ke):
		return Outcome{Verdict: Invalid, Field: ke.Field, Reason: ke.Reason}
	case errors.As(err, &fe):
		return Outcome{Verdict: Invalid, Field: fe.Field, Reason: fe.Reason}
	}
	return Outcome{Verdict: Invalid, Field: field, Reason: err.Error()}
}
