package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/service/stats"
)

// overviewBody is the answer of /ui/api/overview and the data of each event
// of /ui/api/overview/stream.
type overviewBody struct {
	NowMs  int64        `json:"now_ms"`
	Health httpx.Health `json:"health"`
	Config configBody   `json:"config"`
	// Live is false when the dashboard has no decision counts
	// (Options.Stats is nil); the series are then empty.
	Live bool `json:"live"`
	// From is the Unix second of element 0 of every series; the last
	// element is the second in progress.
	From int64 `json:"from"`
	// Seconds is the length of every series.
	Seconds int `json:"seconds"`
	// Limits has the configured limits in configuration order, then any
	// other limit that decided in the window (one since removed by a
	// reload).
	Limits []seriesBody `json:"limits"`
	// Checks counts the timed decisions of each second; LatencyUs is their
	// mean latency in microseconds.
	Checks    []int64 `json:"checks"`
	LatencyUs []int64 `json:"latency_us"`
}

// seriesBody is one limit's decisions per second, by result (the names of
// stats.Results: allowed, denied, shadow_allowed, ...).
type seriesBody struct {
	Name   string             `json:"name"`
	Counts map[string][]int64 `json:"counts"`
}

type configBody struct {
	Version       int64       `json:"version"`
	ReloadsOK     int64       `json:"reloads_ok"`
	ReloadsFailed int64       `json:"reloads_failed"`
	LastReload    *reloadBody `json:"last_reload"`
}

type reloadBody struct {
	AtMs    int64  `json:"at_ms"`
	Version int64  `json:"version"`
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
}

// overview serves GET /ui/api/overview?seconds=N (1..300, default 300).
func (d *dashboard) overview(w http.ResponseWriter, r *http.Request) {
	seconds := stats.Seconds
	if s := r.URL.Query().Get("seconds"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > stats.Seconds {
			httpx.WriteError(w, &httpx.Error{Status: http.StatusBadRequest, Field: "seconds", Message: fmt.Sprintf("want 1 to %d, got %q", stats.Seconds, s)})
			return
		}
		seconds = n
	}
	httpx.WriteJSON(w, http.StatusOK, d.snapshot(seconds))
}

// snapshot is the overview of the last seconds seconds.
func (d *dashboard) snapshot(seconds int) overviewBody {
	now := d.opts.Clock()
	b := overviewBody{
		NowMs: now.UnixMilli(), Health: httpx.HealthOf(d.svc.Health()), Config: configBody{Version: d.svc.ConfigVersion()},
		Live: d.opts.Stats != nil, From: now.Unix() - int64(seconds) + 1, Seconds: seconds,
		Limits: []seriesBody{}, Checks: []int64{}, LatencyUs: []int64{},
	}
	if d.opts.Stats == nil {
		return b
	}
	ok, failed, last, seen := d.opts.Stats.Reloads()
	b.Config.ReloadsOK, b.Config.ReloadsFailed = ok, failed
	if seen {
		b.Config.LastReload = &reloadBody{AtMs: last.At.UnixMilli(), Version: last.Version, OK: last.Err == "", Error: last.Err}
	}
	win := d.opts.Stats.Window(now, seconds)
	b.Checks, b.LatencyUs = win.Checks, win.LatencyMicros
	b.Limits = d.series(win, seconds)
	return b
}

// series lists every configured limit, with zeros if it decided nothing,
// then the other limits the window saw.
func (d *dashboard) series(win stats.Window, seconds int) []seriesBody {
	byName := map[string]*stats.Series{}
	for i := range win.Limits {
		byName[win.Limits[i].Name] = &win.Limits[i]
	}
	var names []string
	listed := map[string]bool{}
	for _, l := range d.svc.Limits() {
		if !listed[l.Name] {
			listed[l.Name] = true
			names = append(names, l.Name)
		}
	}
	for _, ls := range win.Limits {
		if !listed[ls.Name] {
			names = append(names, ls.Name)
		}
	}
	out := make([]seriesBody, len(names))
	for i, name := range names {
		out[i] = seriesBody{Name: name, Counts: map[string][]int64{}}
		for r, result := range stats.Results {
			if ls := byName[name]; ls != nil {
				out[i].Counts[result] = ls.Counts[r]
			} else {
				out[i].Counts[result] = make([]int64, seconds)
			}
		}
	}
	return out
}

// MaxStreams caps the overview streams open at once: each costs a snapshot
// per interval, and the stream needs no login. Past it the page polls.
const MaxStreams = 64

// overviewStream serves GET /ui/api/overview/stream: server-sent events
// named "overview", each an overviewBody. The first holds the last
// stats.Seconds seconds; each one after it, every StreamInterval,
// holds only the last few seconds, which the page merges in. The stream
// ends when the client leaves, when Options.Done is closed, or after
// MaxStreamDuration (the browser then reconnects).
func (d *dashboard) overviewStream(w http.ResponseWriter, r *http.Request) {
	if d.streams.Add(1) > MaxStreams {
		d.streams.Add(-1)
		httpx.WriteError(w, &httpx.Error{Status: http.StatusServiceUnavailable, Field: "", Message: "too many overview streams are open; the page falls back to polling"})
		return
	}
	defer d.streams.Add(-1)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // proxies such as NGINX must not buffer it
	w.WriteHeader(http.StatusOK)
	if !d.sendEvent(w, rc, "retry: 2000\n\n", stats.Seconds) {
		return
	}
	tick := time.NewTicker(d.opts.StreamInterval)
	defer tick.Stop()
	end := time.NewTimer(MaxStreamDuration)
	defer end.Stop()
	delta := min(int(d.opts.StreamInterval/time.Second)+3, stats.Seconds)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-d.opts.Done:
			return
		case <-end.C:
			return
		case <-tick.C:
			if !d.sendEvent(w, rc, "", delta) {
				return
			}
		}
	}
}

// sendEvent writes prefix and an overview event of the last seconds
// seconds, and flushes; false if the client is gone.
func (d *dashboard) sendEvent(w http.ResponseWriter, rc *http.ResponseController, prefix string, seconds int) bool {
	data, err := json.Marshal(d.snapshot(seconds))
	if err != nil {
		return false
	}
	// A server WriteTimeout would cut the stream; each event extends it.
	_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(w, "%sevent: overview\ndata: %s\n\n", prefix, data); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// limits serves GET /ui/api/limits: the limits in force and their version.
func (d *dashboard) limits(w http.ResponseWriter, r *http.Request) {
	httpx.WriteJSON(w, http.StatusOK, struct {
		ConfigVersion int64         `json:"config_version"`
		Limits        []httpx.Limit `json:"limits"`
		// InspectorOff says why the key inspector cannot answer this client
		// (so the page says so before anyone types a token); "" when it can.
		InspectorOff string `json:"inspector_off,omitempty"`
		// PlaneOff is the same for the quota plane's admin endpoints, which
		// the Teams and API keys pages call (tokenlimit serve gives them
		// the dashboard's admin token and loopback rule).
		PlaneOff string `json:"plane_off,omitempty"`
	}{d.svc.ConfigVersion(), httpx.LimitsOf(d.svc.Limits()), d.admin.Off("the key inspector's endpoints", r), d.admin.Off("the quota plane's admin endpoints", r)})
}
