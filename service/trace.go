package service

import (
	"context"

	"github.com/tokenlimit/tokenlimit"
)

// Tracer records a span for each decision the service makes (Check,
// CheckMerged, ReserveWith, Settle). The service does not depend on a
// tracing library: cli implements Tracer with OpenTelemetry. A nil
// Options.Tracer costs one pointer comparison a decision and allocates
// nothing. Implementations must be safe for concurrent use.
type Tracer interface {
	// StartDecision starts the span of one decision named op (see the
	// Op constants) as a child of the span in ctx, and returns the context
	// that the decision's store calls run under. The span is ended once,
	// with EndDecision.
	StartDecision(ctx context.Context, op string) (context.Context, DecisionSpan)
}

// DecisionSpan is one decision's span.
type DecisionSpan interface {
	// EndDecision ends the span with the decision's outcome.
	EndDecision(o TracedOutcome)
}

// The decisions a Tracer is told of.
const (
	OpCheck   = "check"
	OpReserve = "reserve"
	OpSettle  = "settle"
)

// TracedOutcome is what a span may record of a decision: the outcome, the
// count of limits and the name of the limit that denied, never a store key,
// a descriptor's value or a secret.
type TracedOutcome struct {
	Allowed, Unavailable, KeySpaceFull bool
	// Reserved and Replayed are a reserve's (Decision.Reserved, Replayed).
	Reserved, Replayed bool
	// Limits counts the outcomes (enforced and shadow).
	Limits int
	// Denied names the tightest enforced limit when the decision denies;
	// "" when it admits.
	Denied string
	// Settle is a settle's status; "" for the other operations.
	Settle string
	// Err is the error the call returned, if any.
	Err error
}

// startDecision starts op's span if the service has a tracer; the returned
// span is nil otherwise.
func (s *Service) startDecision(ctx context.Context, op string) (context.Context, DecisionSpan) {
	if s.opts.Tracer == nil {
		return ctx, nil
	}
	return s.opts.Tracer.StartDecision(ctx, op)
}

// endDecision ends span (nil: none) with d and err.
func endDecision(span DecisionSpan, d *Decision, err error) {
	if span == nil {
		return
	}
	o := TracedOutcome{Err: err}
	if err == nil {
		o = tracedOutcome(*d)
	}
	span.EndDecision(o)
}

func tracedOutcome(d Decision) TracedOutcome {
	o := TracedOutcome{
		Allowed: d.Allowed, Unavailable: d.Unavailable, KeySpaceFull: d.KeySpaceFull,
		Reserved: d.Reserved, Replayed: d.Replayed, Limits: len(d.Limits),
	}
	if t, ok := d.Tightest(); ok && !d.Allowed {
		o.Denied = t.Name
	}
	return o
}

// endSettle ends span (nil: none) with a settle's status and err.
func endSettle(span DecisionSpan, st tokenlimit.SettleStatus, err error) {
	if span == nil {
		return
	}
	o := TracedOutcome{Err: err}
	if err == nil {
		o.Settle = st.String()
	}
	span.EndDecision(o)
}
