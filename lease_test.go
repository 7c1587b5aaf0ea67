package tokenlimit_test

import (
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// TestLeaseValidateNamesTheField: each wrong term is refused naming its
// field.
func TestLeaseValidateNamesTheField(t *testing.T) {
	bucket := tokenlimit.TokenBucketLimit(100, 10, time.Second) // window 10s
	for _, c := range []struct {
		limit tokenlimit.Limit
		lease tokenlimit.Lease
		field string
	}{
		{bucket, tokenlimit.Lease{Size: 101, TTL: time.Second}, "lease.size"},
		{bucket, tokenlimit.Lease{Size: 0, TTL: time.Second}, "lease.size"},
		{bucket, tokenlimit.Lease{Size: 10, TTL: 11 * time.Second}, "lease.ttl"},
		{bucket, tokenlimit.Lease{Size: 10, TTL: time.Microsecond}, "lease.ttl"},
		{tokenlimit.FixedWindowLimit(10, time.Minute), tokenlimit.Lease{Size: 5, TTL: 2 * time.Minute}, "lease.ttl"},
		{tokenlimit.SlidingLogLimit(10, time.Minute), tokenlimit.Lease{Size: 5, TTL: time.Second}, "lease"},
		{tokenlimit.SlidingCounterLimit(10, time.Minute), tokenlimit.Lease{Size: 5, TTL: time.Second}, "lease"},
		{bucket, tokenlimit.Lease{Size: 100, TTL: 10 * time.Second}, ""},
		{tokenlimit.GCRALimit(9, 10, time.Second), tokenlimit.Lease{Size: 10, TTL: time.Second}, ""},
	} {
		err := c.lease.Validate(c.limit)
		if c.field == "" {
			if err != nil {
				t.Errorf("%s with %+v: %v; want valid", c.limit, c.lease, err)
			}
			continue
		}
		if got := testkit.FieldOf(t, err); got != c.field {
			t.Errorf("%s with %+v: field %q (%v); want %q", c.limit, c.lease, got, err, c.field)
		}
	}
}
