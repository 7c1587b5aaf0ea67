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
