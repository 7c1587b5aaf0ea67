package testkit

import (
	"errors"
	"testing"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// FieldOf returns the Field of err's *tokenlimit.FieldError, failing the
// test if err is not one or does not match tokenlimit.ErrInvalid.
func FieldOf(t *testing.T, err error) string {
	t.Helper()
	var fe *tokenlimit.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T), want a *tokenlimit.FieldError", err, err)
	}
	if !errors.Is(err, tokenlimit.ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) is false", err)
	}
	return fe.Field
}

// BucketBound is the largest capacity validation accepts for a bucket of
// l's rate, one unit every num/den µs: capacity × num must stay within
// storekit.MaxBucketSpan.
func BucketBound(l tokenlimit.Limit) int64 {
	num, _ := l.Interval()
	return storekit.MaxBucketSpan / num
}
