package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/tokenlimit/tokenlimit/internal/logging"
	"github.com/tokenlimit/tokenlimit/internal/redact"
	"github.com/tokenlimit/tokenlimit/service"
)

// logDecision logs a decision at debug level, denials and unavailable
// answers included: a burst of denials is the limiter working, and would
// otherwise flood the log (the metrics count them; a store outage is logged
// once, by the service, when its breaker opens). Budget keys are not logged:
// they may hold api keys.
func (a *api) logDecision(ctx context.Context, op string, d service.Decision, reqs []service.Request) {
	if !a.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []any{"op", op, "allowed", d.Allowed, "unavailable", d.Unavailable}
	if o, ok := d.Tightest(); ok {
		attrs = append(attrs, "limit", o.Name, "remaining", o.Remaining, "retry_after", o.RetryAfter)
	}
	attrs = append(attrs, "requests", requestsLog(reqs))
	a.log.DebugContext(ctx, "rate-limit decision", attrs...)
}

// withRequestID gives every request an id: the client's X-Request-Id when
// it is valid (see logging.ValidRequestID), a fresh one otherwise. The id is
// in the answer's X-Request-Id header and on every log line of the request.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !logging.ValidRequestID(id) {
			id = logging.NewRequestID()
		}
		w.Header()["X-Request-Id"] = []string{id}
		next.ServeHTTP(w, r.WithContext(logging.WithRequestID(r.Context(), id)))
	})
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
