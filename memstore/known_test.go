package memstore

import (
	"reflect"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
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
