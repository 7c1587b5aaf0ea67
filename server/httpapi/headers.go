package httpapi

import (
	"net/http"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/ratelimitheader"
	"github.com/tokenlimit/tokenlimit/service"
)

// setRateLimitHeaders describes the tightest enforced limit of d (see
// service.Decision.Tightest) in h, as package ratelimitheader renders it:
// Retry-After (429 only), X-RateLimit-*, RateLimit and RateLimit-Policy,
// whose window is that of the limit the request was decided under (api key
// overrides and calendar windows included). A decision with no enforced
// limit, that is unavailable (503) or that found the key space full (no
// budget was consulted) sets none.
func (a *api) setRateLimitHeaders(h http.Header, d service.Decision, reqs []service.Request) {
	setAlertHeaders(h, d)
	o, ok := d.Tightest()
	if !ok || d.Unavailable || d.KeySpaceFull {
		return
	}
	var desc map[string]string
	if o.Request >= 0 && o.Request < len(reqs) {
		desc = reqs[o.Request].Descriptors
	}
	var window time.Duration
	if l, ok := a.svc.LimitFor(o.Name, desc); ok {
		window = l.Window()
	}
	ratelimitheader.Of(o.Name, o.Result, !d.Allowed, window).SetHTTP(h)
}

// setAlertHeaders sets service.AlertHeader for each alert_at threshold
// d's charges crossed.
func setAlertHeaders(h http.Header, d service.Decision) {
	for _, al := range d.Alerts {
		h.Add(service.AlertHeader, al.String())
	}
}
