package httpapi

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/tokenlimit/tokenlimit/internal/redact"
	"github.com/tokenlimit/tokenlimit/service"
)

// logDecision logs a decision at debug level, and denials and unavailable
// answers at info and warn. Budget keys are not logged: they may hold api
// keys.
func (a *api) logDecision(ctx context.Context, op string, d service.Decision, reqs []service.Request) {
	level := slog.LevelDebug
	switch {
	case d.Unavailable:
		level = slog.LevelWarn
	case !d.Allowed:
		level = slog.LevelInfo
	}
	if !a.log.Enabled(ctx, level) {
		return
	}
	attrs := []any{"op", op, "allowed", d.Allowed, "unavailable", d.Unavailable}
	if o, ok := d.Tightest(); ok {
		attrs = append(attrs, "limit", o.Name, "remaining", o.Remaining, "retry_after", o.RetryAfter)
	}
	attrs = append(attrs, "requests", requestsLog(reqs))
	a.log.Log(ctx, level, "rate-limit decision", attrs...)
}

// requestsLog logs requests as a group per index: descriptors (redacted)
// and cost.
type requestsLog []service.Request

// LogValue implements slog.LogValuer.
func (rs requestsLog) LogValue() slog.Value {
	attrs := make([]slog.Attr, len(rs))
	for i, r := range rs {
		attrs[i] = slog.Group(strconv.Itoa(i), "descriptors", redact.Descriptors(r.Descriptors), "cost", r.Cost)
	}
	return slog.GroupValue(attrs...)
}
