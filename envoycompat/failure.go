package envoycompat

import (
	"fmt"
	"strings"
)

// FailureMode is what a domain's requests answer while the store fails
// (its calls error, pass the store timeout, or the breaker skips them:
// resilient.ErrUnavailable).
type FailureMode int

// The failure modes.
const (
	// FailError fails the RLS call (gRPC UNAVAILABLE), as
	// envoyproxy/ratelimit does: Envoy's filter then decides, admitting
	// unless failure_mode_deny is set. The default.
	FailError FailureMode = iota
	// FailClosed answers OVER_LIMIT for every descriptor a limit applies
	// to, whatever the filter's setting, with Response.StoreUnavailable
	// set so that the transport says why.
	FailClosed
	// FailOpen answers OK, counting nothing (the drop-in keeps no local
	// budget), with Response.StoreUnavailable set.
	FailOpen
)

// String returns "error", "closed" or "open".
func (m FailureMode) String() string {
	switch m {
	case FailClosed:
		return "closed"
	case FailOpen:
		return "open"
	}
	return "error"
}

// ParseFailureMode parses "error", "closed" or "open".
func ParseFailureMode(s string) (FailureMode, error) {
	for _, m := range []FailureMode{FailError, FailClosed, FailOpen} {
		if strings.EqualFold(s, m.String()) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%q: want error, closed or open", s)
}

// FailureModes says which failure mode each domain's requests take. The
// zero value fails every call, as envoyproxy/ratelimit does.
type FailureModes struct {
	// Default is the mode of a domain not in Domains.
	Default FailureMode
	// Domains holds the modes of domains that differ from Default.
	Domains map[string]FailureMode
}

// Of returns domain's failure mode.
func (f FailureModes) Of(domain string) FailureMode {
	if m, ok := f.Domains[domain]; ok {
		return m
	}
	return f.Default
}

// failed answers ds while the store fails, in mode m (FailClosed or
// FailOpen): each descriptor a limit applies to is over the limit (closed)
// or OK (open), with its limit and neither remaining nor reset (nothing was
// counted); an unlimited descriptor is OK, as always. Global shadow mode
// still answers OK overall.
func (e *Engine) failed(ds []applied, m FailureMode) Response {
	resp := Response{OverallCode: OK, Statuses: make([]Status, len(ds)), StoreUnavailable: true}
	for i, d := range ds {
		st := Status{Code: OK}
		switch l := d.limit; {
		case d.unlimited:
			st.LimitRemaining = ^uint32(0)
		case l != nil:
			st.CurrentLimit = &CurrentLimit{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit, Name: l.Name}
			if m == FailClosed && !l.ShadowMode {
				st.Code, resp.OverallCode = OverLimit, OverLimit
			}
		}
		resp.Statuses[i] = st
	}
	if e.opts.GlobalShadowMode {
		resp.OverallCode = OK
	}
	return resp
}
