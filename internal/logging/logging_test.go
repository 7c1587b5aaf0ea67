package logging

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestNewWritesMillisecondsAndTheRequestID(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := New(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.InfoContext(WithRequestID(context.Background(), "r-1"), "shown", "retry_after", 1500*time.Microsecond,
		slog.Group("g", "wait", 2*time.Second))
	want := `"msg":"shown","retry_after_ms":1.5,"g":{"wait_ms":2000},"request_id":"r-1"}`
	if got := buf.String(); strings.Contains(got, "hidden") || !strings.Contains(got, want) {
		t.Errorf("log %s, want no debug line and %s", got, want)
	}
	buf.Reset()
	text, _ := New(&buf, "DEBUG", "text")
	text.With("a", 1).Debug("x")
	if got := buf.String(); !strings.Contains(got, `level=DEBUG msg=x a=1`) {
		t.Errorf("text log %q", got)
	}
	for _, bad := range [][2]string{{"loud", "json"}, {"info", "xml"}} {
		if _, err := New(&buf, bad[0], bad[1]); err == nil {
			t.Errorf("New(%q, %q): no error", bad[0], bad[1])
		}
	}
}

func TestValidRequestID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"abc": true, "trace-1.2:3/4+5=6@x_y": true, strings.Repeat("a", 128): true,
		"": false, strings.Repeat("a", 129): false, "a b": false, `a"b`: false, "a\nb": false, "é": false,
	} {
		if got := ValidRequestID(id); got != want {
			t.Errorf("ValidRequestID(%q) = %v, want %v", id, got, want)
		}
	}
	if id := NewRequestID(); len(id) != 16 || !ValidRequestID(id) || id == NewRequestID() {
		t.Errorf("NewRequestID() = %q: want 16 fresh hex digits", id)
	}
}
