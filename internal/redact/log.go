package redact

import (
	"log/slog"
	"regexp"
	"sort"
)

// Descriptors logs request descriptors with the api key shortened by Hint,
// names in order.
type Descriptors map[string]string

// LogValue implements slog.LogValuer.
func (d Descriptors) LogValue() slog.Value {
	names := make([]string, 0, len(d))
	for k := range d {
		names = append(names, k)
	}
	sort.Strings(names)
	attrs := make([]slog.Attr, len(names))
	for i, k := range names {
		v := d[k]
		if k == "api_key" {
			v = Hint(v)
		}
		attrs[i] = slog.String(k, v)
	}
	return slog.GroupValue(attrs...)
}

// apiKeyInKey finds api key values in budget keys such as
// "llm|api_key=sk-123|model=x" (values are URL-escaped, so one ends at '|',
// ':' or a space).
var apiKeyInKey = regexp.MustCompile(`api_key=[^|:\s]+`)

// Error is err's message with every api key in a budget key shortened by
// Hint, for logging errors that quote keys.
func Error(err error) string {
	return apiKeyInKey.ReplaceAllStringFunc(err.Error(), func(m string) string {
		return "api_key=" + Hint(m[len("api_key="):])
	})
}
