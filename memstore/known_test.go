package memstore

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// sameLimit compares tokenlimit.Limit field by field, so a field added to
// Limit must be added there too: two limits that differ in any one field
// are not the same.
func TestSameLimitComparesEveryField(t *testing.T) {
	base := tokenlimit.Limit{Algorithm: tokenlimit.GCRA, Quota: 10, Period: time.Second, Burst: 20, Offset: time.Millisecond}
	if other := base; !sameLimit(&base, &other) {
		t.Fatalf("sameLimit(%+v, itself) = false", base)
	}
	for i := range reflect.TypeFor[tokenlimit.Limit]().NumField() {
		other := base
		f := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Kind() {
		case reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Uint8:
			f.SetUint(f.Uint() + 1)
		default:
			t.Fatalf("field %s of kind %s: teach this test to change it", reflect.TypeFor[tokenlimit.Limit]().Field(i).Name, f.Kind())
		}
		if sameLimit(&base, &other) {
			t.Errorf("sameLimit(%+v, %+v) = true", base, other)
		}
	}
}

// quickValid, the one-item path's check of a known limit's item, accepts
// exactly the keys and costs that storekit.ValidateItem does: at the
// edges of both bounds, and for an empty key.
func TestQuickValidAgreesWithValidate(t *testing.T) {
	limit := tokenlimit.TokenBucketLimit(10, 5, time.Second)
	keys := []string{"", "k", strings.Repeat("x", tokenlimit.MaxKeyLength), strings.Repeat("x", tokenlimit.MaxKeyLength+1)}
	costs := []int64{-1, 0, 1, tokenlimit.MaxCost, tokenlimit.MaxCost + 1}
	for _, key := range keys {
		for _, cost := range costs {
			it := tokenlimit.Item{Key: key, Limit: limit, Cost: cost}
			if got, want := quickValid(&it), storekit.ValidateItem(it) == nil; got != want {
				t.Errorf("key of %d bytes, cost %d: quickValid %v, Validate accepts %v", len(key), cost, got, want)
			}
		}
	}
}
