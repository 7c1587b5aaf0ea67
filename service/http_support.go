package service

import "github.com/tokenlimit/tokenlimit"

// LimitFor returns the engine limit that the limit named name applies, right
// now, to a request with these descriptors: the configured one, or the
// request's api key override, and for a calendar quota the window of the
// current day or month. Transports use it to describe a limit's policy (the
// IETF RateLimit-Policy window). ok is false when no limit in force has that
// name, for example after a reload removed it.
func (s *Service) LimitFor(name string, descriptors map[string]string) (l tokenlimit.Limit, ok bool) {
	cfg := s.rules.Load().cfg
	for i := range cfg.Limits {
		cl := &cfg.Limits[i]
		if cl.Name != name {
			continue
		}
		desc := enrich(cfg, descriptors)
		l = cl.Limit
		if o, ok := cfg.APIKeys[desc["api_key"]].Overrides[name]; ok {
			l = o
		}
		if cl.Calendar != "" {
			_, l = calendarWindow(tokenlimit.Item{Limit: l}, cl, cfg.Location, s.opts.Clock())
		}
		return l, true
	}
	return tokenlimit.Limit{}, false
}
