package web

import (
	"net/http"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/service"
	"github.com/tokenlimit/tokenlimit/web/sim"
)

// inspectBody is the body of /ui/api/inspect: the descriptors that select
// the budgets.
type inspectBody struct {
	Descriptors map[string]string `json:"descriptors"`
}

// stateBody is one budget's live state.
type stateBody struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	// Algorithm is the engine's; Concurrency marks a limit on requests in
	// flight (a sliding log whose window is the lease). Policy describes
	// the engine limit applied, such as "token_bucket 2/1s burst 10" (api
	// key overrides and calendar windows included).
	Algorithm   tokenlimit.Algorithm `json:"algorithm"`
	Concurrency bool                 `json:"concurrency,omitempty"`
	Policy      string               `json:"policy"`
	Shadow      bool                 `json:"shadow"`
	Limit       int64                `json:"limit"`
	Remaining   int64                `json:"remaining"`
	// Used is Limit - Remaining: the cost counted in the window, the
	// bucket's missing tokens, or the reservations in flight.
	Used int64 `json:"used"`
	// Level is a bucket's exact content in tokens (fractions included).
	Level *float64 `json:"level,omitempty"`
	// ResetAfterMs is how long until the budget is whole again; an idle
	// key expires then.
	ResetAfterMs int64 `json:"reset_after_ms"`
	// Entries are a sliding log's charges in its window, oldest first:
	// how long ago each was taken, and its cost (a refund is negative).
	Entries []entryBody `json:"entries,omitempty"`
}

// entryBody is one entry of a sliding log.
type entryBody struct {
	AgoMs int64 `json:"ago_ms"`
	Cost  int64 `json:"cost"`
}

// inspect serves POST /ui/api/inspect: the live state of every budget the
// descriptors select, charging nothing (service.Service.Inspect).
func (d *dashboard) inspect(w http.ResponseWriter, r *http.Request) {
	var b inspectBody
	if err := httpx.DecodeOptional(w, r, maxBodyBytes, &b); err != nil {
		httpx.Fail(w, err)
		return
	}
	dec, err := d.svc.Inspect(r.Context(), service.Request{Descriptors: b.Descriptors})
	if err != nil {
		serviceError(w, err)
		return
	}
	infos := map[string]service.LimitInfo{}
	for _, l := range d.svc.Limits() {
		infos[l.Name] = l
	}
	out := make([]stateBody, len(dec.Limits))
	for i, o := range dec.Limits {
		out[i] = d.state(o, infos[o.Name], b.Descriptors)
		for _, e := range o.Entries {
			out[i].Entries = append(out[i].Entries, entryBody{AgoMs: dec.At.Sub(e.At).Milliseconds(), Cost: e.Cost})
		}
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		AtMs   int64       `json:"at_ms"`
		Limits []stateBody `json:"limits"`
	}{dec.At.UnixMilli(), out})
}

func (d *dashboard) state(o service.Outcome, info service.LimitInfo, desc map[string]string) stateBody {
	s := stateBody{
		Name: o.Name, Key: o.Key, Algorithm: info.Algorithm, Concurrency: info.Concurrency, Shadow: o.Shadow,
		Limit: o.Limit, Remaining: o.Remaining, Used: o.Limit - o.Remaining, ResetAfterMs: httpx.Millis(o.ResetAfter),
	}
	if l, ok := d.svc.LimitFor(o.Name, desc); ok {
		s.Policy = l.String()
		if level, ok := sim.BucketLevel(l, o.Result); ok {
			s.Level = &level
		}
	}
	return s
}

// serviceError answers an error of the service as the API does: 400 naming
// the field for an invalid request, 503 when the store failed.
func serviceError(w http.ResponseWriter, err error) {
	e, _ := httpx.ServiceError(err, true)
	httpx.WriteError(w, e)
}
