package redact

import (
	"errors"
	"testing"
)

func TestError(t *testing.T) {
	t.Parallel()
	err := errors.New("service: reset tokens|api_key=sk-live-0123456789abcdef|model=x: down; api_key=ab%7Ccd: x")
	want := "service: reset tokens|api_key=sk-l…(24 bytes)|model=x: down; api_key=a…(7 bytes): x"
	if got := Error(err); got != want {
		t.Errorf("Error:\n%s\nwant\n%s", got, want)
	}
}
