package memstore_test

import (
	"testing"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Env {
		st, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return storetest.Env{Replica: func() tokenlimit.Store { return st }}
	})
}

// checkOnly is a store of a third party that keeps no reservations: only
// the methods of tokenlimit.Store are promoted from the memstore it wraps.
type checkOnly struct{ tokenlimit.Store }

// TestConformanceWithoutReserver runs the suite on a store that is not a
// tokenlimit.Reserver: it decides, adjusts and resets as the memstore does,
// and every reservation case answers tokenlimit.ErrUnsupported.
func TestConformanceWithoutReserver(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Env {
		st, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tokenlimit.Store(checkOnly{st}).(tokenlimit.Reserver); ok {
			t.Fatal("checkOnly is a Reserver: the test would prove nothing")
		}
		return storetest.Env{Replica: func() tokenlimit.Store { return checkOnly{st} }}
	})
}
