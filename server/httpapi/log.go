package httpapi

import (
	"context"
	"log/slog"
	"regexp"
	"sort"
	"strconv"

	"github.com/tokenlimit/tokenlimit/internal/redact"
	"github.com/tokenlimit/tokenlimit/service"
)

// redacted logs descriptors with the api key shortened by redact.Hint.
type redacted map[string]string

// LogValue implements slog.LogValuer.
func (d redacted) LogValue() slog.Value {
	names := make([]string, 0, len(d))
	for k := range d {
		names = append(names, k)
	}
	sort.Strings(names)
	attrs := make([]slog.Attr, len(names))
	for i, k := range names {
		v := d[k]
		if k == "api_key" {
			v = redact.Hint(v)
		}
		attrs[i] = slog.String(k, v)
	}
	return slog.GroupValue(attrs...)
}

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
		attrs[i] = slog.Group(strconv.Itoa(i), "descriptors", redacted(r.Descriptors), "cost", r.Cost)
	}
	return slog.GroupValue(attrs...)
}

// apiKeyInKey finds api key values in budget keys such as
// "llm|api_key=sk-123|model=x" (values are URL-escaped, so one ends at '|',
// ':' or a space).
var apiKeyInKey = regexp.MustCompile(`api_key=[^|:\s]+`)

// scrubbed is err's message with every api key in a budget key shortened by
// secretHint, for logging errors that quote keys.
func scrubbed(err error) string {
	return apiKeyInKey.ReplaceAllStringFunc(err.Error(), func(m string) string {
		return "api_key=" + redact.Hint(m[len("api_key="):])
	})
}
