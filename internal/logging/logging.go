// Package logging builds the servers' structured loggers: a level and a
// format (text or JSON) chosen by flags, durations written as milliseconds,
// and the request id of a request's context on every line logged with it.
package logging

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
)

// Formats are the values New accepts for format.
var Formats = []string{"json", "text"}

// New returns a logger writing records at level and above to w, as one JSON
// object per line (format "json") or as key=value text ("text"). A duration
// attribute "x" is written as "x_ms", a number of milliseconds; a record
// logged with a context carrying a request id (WithRequestID) gets a
// request_id attribute. The logger is safe for concurrent use when w is
// (an *os.File is).
func New(w io.Writer, level, format string) (*slog.Logger, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: millis}
	var h slog.Handler
	switch format {
	case "json":
		h = slog.NewJSONHandler(w, opts)
	case "text":
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format %q: want %s", format, strings.Join(Formats, " or "))
	}
	return slog.New(requestIDHandler{h}), nil
}

// ParseLevel reads debug, info, warn or error (any case).
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	switch strings.ToLower(s) {
	case "debug":
		l = slog.LevelDebug
	case "info":
		l = slog.LevelInfo
	case "warn", "warning":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// millis writes a duration as milliseconds under the key with "_ms" added.
func millis(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindDuration {
		return a
	}
	return slog.Float64(a.Key+"_ms", float64(a.Value.Duration())/float64(time.Millisecond))
}

type ctxKey struct{}

// WithRequestID returns ctx carrying the request id id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// RequestID returns the request id ctx carries, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// MaxRequestIDLength is the longest request id a client may choose.
const MaxRequestIDLength = 128

// ValidRequestID reports whether a client's request id can be used as is:
// 1 to MaxRequestIDLength bytes of letters, digits and -_.:/+=@ (what
// gateways and tracers generate), so that it is safe in a log line and a
// header.
func ValidRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:/+=@", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// NewRequestID returns a fresh random request id: 16 hex digits.
func NewRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// requestIDHandler adds the context's request id to each record.
type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r = r.Clone()
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
