package envoycompat

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// FailureMode is what a descriptor answers while the store fails (its
// calls error, pass the store timeout, or the breaker skips them:
// resilient.ErrUnavailable).
type FailureMode int

// The failure modes.
const (
	// FailError fails the RLS call (gRPC UNAVAILABLE), as
	// envoyproxy/ratelimit does: Envoy's filter then decides, admitting
	// unless failure_mode_deny is set. The default.
	FailError FailureMode = iota
	// FailClosed answers OVER_LIMIT for the descriptor, whatever the
	// filter's setting, with Response.StoreUnavailable set so that the
	// transport says why.
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
	return 0, fmt.Errorf("mode %q: want error, closed or open", s)
}

// FailureModes says which failure mode each descriptor takes. The zero
// value fails every call, as envoyproxy/ratelimit does.
type FailureModes struct {
	// Default is the mode of a descriptor that no entry of Paths covers.
	Default FailureMode
	// Paths holds modes set for a domain ("api") or for a descriptor of
	// the configuration and every descriptor nested in it, named by its
	// path as RateLimit.Path names it: the domain, then each level's key,
	// or key_value when the level has a value, joined by '.'
	// ("api.path_/login", "api.plan_free.user"). The most specific wins:
	// a descriptor takes the mode of its own path, else of its nearest
	// ancestor's, else of its domain, else Default. A descriptor whose
	// limit comes from the request (Descriptor.Limit) takes its domain's.
	Paths map[string]FailureMode
}

// ParseFailureModes reads failure modes written as MODE (Default) or
// PATH=MODE (see FailureModes.Paths); PATH ends at the last '=', so it
// may hold '=' and '.' itself. Each error names the spec and the reason; a
// spec setting what another already set is an error.
func ParseFailureModes(specs []string) (FailureModes, error) {
	var modes FailureModes
	defaultSet := ""
	for _, spec := range specs {
		path, mode, scoped := cutLast(spec, "=")
		if !scoped {
			path, mode = "", spec
		}
		m, err := ParseFailureMode(mode)
		switch {
		case err != nil:
			return FailureModes{}, fmt.Errorf("%s: %w", spec, err)
		case scoped && path == "":
			return FailureModes{}, fmt.Errorf("%s: the domain or descriptor path before '=' must not be empty (want MODE, DOMAIN=MODE or DOMAIN.KEY[_VALUE]...=MODE)", spec)
		case !scoped && defaultSet != "":
			return FailureModes{}, fmt.Errorf("%s: the default mode is already set by %s", spec, defaultSet)
		case !scoped:
			modes.Default, defaultSet = m, spec
			continue
		}
		if _, dup := modes.Paths[path]; dup {
			return FailureModes{}, fmt.Errorf("%s: %s is given a mode twice", spec, path)
		}
		if modes.Paths == nil {
			modes.Paths = map[string]FailureMode{}
		}
		modes.Paths[path] = m
	}
	return modes, nil
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// Check reports, in one error, the paths of f that name neither a domain
// nor a descriptor of cfg: a mode set for nothing (a typo, a descriptor
// since removed) would silently give another mode than meant during an
// outage.
func (f FailureModes) Check(cfg *Config) error {
	var unknown []string
	for _, p := range slices.Sorted(maps.Keys(f.Paths)) {
		if !cfg.paths[p] {
			unknown = append(unknown, p+"="+f.Paths[p].String())
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	return fmt.Errorf("%s: no such domain or descriptor in the configuration (a path is the domain, then each level's KEY or KEY_VALUE, joined by '.')", strings.Join(unknown, ", "))
}

// of is the mode of a descriptor of domain whose limit is l.
func (f FailureModes) of(domain string, l *RateLimit) FailureMode {
	for i := len(l.scopes) - 1; i >= 0; i-- {
		if m, ok := f.Paths[l.scopes[i]]; ok {
			return m
		}
	}
	if m, ok := f.Paths[domain]; ok {
		return m
	}
	return f.Default
}

// failed answers ds while the store fails, each limited descriptor by its
// mode: closed is over the limit, open is OK, both with their limit and
// neither remaining nor reset (nothing was counted); an unlimited
// descriptor is OK, as always. A request with a descriptor over the limit
// (closed) is answered so whatever the other descriptors' modes; otherwise
// one whose mode is error fails the call (ok false); otherwise it is OK.
// Global shadow mode still answers OK overall.
func (e *Engine) failed(domain string, ds []applied) (resp Response, ok bool) {
	resp = Response{OverallCode: OK, Statuses: make([]Status, len(ds)), StoreUnavailable: true}
	failCall := false
	for i, d := range ds {
		st := Status{Code: OK}
		switch l := d.limit; {
		case d.unlimited:
			st.LimitRemaining = ^uint32(0)
		case l != nil:
			st.CurrentLimit = &CurrentLimit{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit, Name: l.Name}
			switch e.opts.FailureModes.of(domain, l) {
			case FailError:
				failCall = true
			case FailClosed:
				if !l.ShadowMode {
					st.Code, resp.OverallCode = OverLimit, OverLimit
				}
			}
		}
		resp.Statuses[i] = st
	}
	if failCall && resp.OverallCode != OverLimit {
		return Response{}, false
	}
	if e.opts.GlobalShadowMode {
		resp.OverallCode = OK
	}
	return resp, true
}
