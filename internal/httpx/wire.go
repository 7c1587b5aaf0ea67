package httpx

import (
	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/service"
)

// Limit is the JSON shape of one limit in force (service.LimitInfo), in
// the listings of the API (/v1/limits) and of the dashboard
// (/ui/api/limits). PeriodMs is in milliseconds; Quota and Burst are in the
// limit's units (micro-dollars when Unit is "usd").
type Limit struct {
	Name        string               `json:"name"`
	Match       map[string]string    `json:"match,omitempty"`
	Key         []string             `json:"key"`
	Algorithm   tokenlimit.Algorithm `json:"algorithm"`
	Concurrency bool                 `json:"concurrency,omitempty"`
	Quota       int64                `json:"quota"`
	PeriodMs    int64                `json:"period_ms"`
	Burst       int64                `json:"burst,omitempty"`
	Cost        string               `json:"cost"`
	Shadow      bool                 `json:"shadow,omitempty"`
	FailOpen    bool                 `json:"fail_open"`
	Calendar    config.Calendar      `json:"calendar,omitempty"`
	Unit        string               `json:"unit,omitempty"`
	Lease       *Lease               `json:"lease,omitempty"`
	// Store names the named store holding the limit's budgets; absent for
	// the main store.
	Store string `json:"store,omitempty"`
}

// Lease is the JSON shape of a leased limit's terms, what this replica's
// leases of it hold, and its takes and returns since the replica started
// (service.LeaseInfo). Amounts are in the limit's units; TTLMs in
// milliseconds.
type Lease struct {
	Size        int64 `json:"size"`
	TTLMs       int64 `json:"ttl_ms"`
	Outstanding int   `json:"outstanding"`
	Leased      int64 `json:"leased"`
	Unused      int64 `json:"unused"`
	Taken       int64 `json:"taken"`
	Denied      int64 `json:"denied"`
	Failed      int64 `json:"failed"`
	Returned    int64 `json:"returned"`
	Stood       int64 `json:"stood"`
}

// LimitsOf is the JSON shape of the listing ls, in the same order.
func LimitsOf(ls []service.LimitInfo) []Limit {
	out := make([]Limit, len(ls))
	for i, l := range ls {
		out[i] = Limit{
			Name: l.Name, Match: l.Match, Key: l.Key, Algorithm: l.Algorithm, Concurrency: l.Concurrency,
			Quota: l.Quota, PeriodMs: l.PeriodMs, Burst: l.Burst, Cost: l.Cost, Shadow: l.Shadow,
			FailOpen: l.FailOpen, Calendar: l.Calendar, Unit: l.Unit, Store: l.Store,
		}
		if le := l.Lease; le != nil {
			out[i].Lease = &Lease{Size: le.Size, TTLMs: le.TTL.Milliseconds(), Outstanding: le.Outstanding, Leased: le.Leased, Unused: le.Unused,
				Taken: le.Taken, Denied: le.Denied, Failed: le.Failed, Returned: le.Returned, Stood: le.Stood}
		}
	}
	return out
}

// Health is the JSON shape of the store's health (service.Health), in the
// API's /readyz and the dashboard's overview.
type Health struct {
	Store        string `json:"store"`
	Breaker      string `json:"breaker"`
	Degraded     bool   `json:"degraded"`
	Keys         int    `json:"keys"`
	MaxKeys      int    `json:"max_keys"`
	LocalKeys    int    `json:"local_keys"`
	LocalMaxKeys int    `json:"local_max_keys"`
	KeySpaceFull bool   `json:"key_space_full"`
	Error        string `json:"error,omitempty"`
	// Stores are the named stores' (stores: in the configuration).
	Stores []StoreHealth `json:"stores,omitempty"`
}

// StoreHealth is the JSON shape of a named store's health
// (service.StoreHealth).
type StoreHealth struct {
	Name     string `json:"name"`
	Breaker  string `json:"breaker"`
	Degraded bool   `json:"degraded"`
	Error    string `json:"error,omitempty"`
}

// HealthOf is the JSON shape of h.
func HealthOf(h service.Health) Health {
	out := Health{
		Store: h.Store, Breaker: h.Breaker, Degraded: h.Degraded, Keys: h.Keys, MaxKeys: h.MaxKeys,
		LocalKeys: h.LocalKeys, LocalMaxKeys: h.LocalMaxKeys, KeySpaceFull: h.KeySpaceFull, Error: h.Error,
	}
	for _, s := range h.Stores {
		out.Stores = append(out.Stores, StoreHealth(s))
	}
	return out
}
