// Package web is tokenlimit's dashboard: one page, served at "/", with the
// live overview of the service (decisions per second per limit, store
// health, configuration version), the limits in force, a key inspector, the
// quota plane's Teams and API keys pages (over the API's /v1/admin/teams and
// /v1/admin/keys, which tokenlimit serve serves beside it), and
// simulators that run the real engine in a sandbox — the sliding window and
// the token bucket of the classic rate-limiting walkthroughs (5 per 5 s;
// 10 tokens refilling 2 per second), the race between client-side
// GET-then-INCR and the atomic check, and the five algorithms side by side
// (package web/sim).
//
// The page is plain HTML, CSS and JavaScript embedded with embed.FS: no
// build step, nothing fetched from elsewhere. The JavaScript only draws what
// the server answers; every decision it shows was taken by a
// tokenlimit.Limiter. The JSON endpoints the page uses live under /ui/api/
// and are described in docs/dashboard.md.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"sync/atomic"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/service"
	"github.com/tokenlimit/tokenlimit/service/stats"
	"github.com/tokenlimit/tokenlimit/web/sim"
)

//go:embed assets
var assets embed.FS

// Defaults for Options' zero values.
const (
	DefaultStreamInterval = time.Second
	DefaultMaxSessions    = sim.DefaultMaxSessions
	DefaultSessionIdle    = sim.DefaultSessionIdle
	// MaxStreamDuration ends an overview stream after this long; the
	// browser reconnects by itself. It bounds how long a stream can hold
	// up a graceful shutdown when Options.Done is not set.
	MaxStreamDuration = 5 * time.Minute
)

// maxBodyBytes caps the bodies of the dashboard's endpoints.
const maxBodyBytes = 16 << 10

// Options configures the dashboard. The zero value serves everything but
// the key inspector, with no live decision counts.
type Options struct {
	// AdminToken is the bearer token the key inspector needs to inspect
	// and reset budgets, as the API's /v1/admin endpoints do, named
	// "admin" in the audit log lines; AdminTokens are more, by name. None
	// turns the inspector off: its endpoints answer 403.
	AdminToken  string
	AdminTokens map[string]string
	// AdminFromAnywhere lets the inspector answer clients that are not on
	// loopback; by default only 127.0.0.0/8 and ::1 may use it.
	AdminFromAnywhere bool
	// AdminGate, if not nil, guards the inspector in place of a gate of
	// AdminToken, AdminTokens and AdminFromAnywhere (which are then
	// unused): the server's, shared with its API.
	AdminGate *httpx.AdminGate
	// Stats are the service's live decision counts (service.Service.Stats),
	// shown by the overview. Nil: the overview shows the store's health
	// and the configuration, and says that live counts are off.
	Stats *stats.Stats
	// Clock is the dashboard's time: the simulators' clock and the end of
	// the overview's window. Nil means time.Now.
	Clock func() time.Time
	// StreamInterval is how often the overview stream sends an update.
	// Zero means DefaultStreamInterval.
	StreamInterval time.Duration
	// Done, when closed, ends every overview stream, so that a graceful
	// shutdown need not wait for them; pass the server's shutdown signal.
	// Nil: streams end when their client leaves or after
	// MaxStreamDuration.
	Done <-chan struct{}
	// MaxSessions bounds the simulator sessions kept at once (each is a
	// small in-memory store); past it the least recently used is dropped.
	// Zero means DefaultMaxSessions.
	MaxSessions int
	// SessionIdle is how long an unused simulator session is kept. Zero
	// means DefaultSessionIdle.
	SessionIdle time.Duration
	// Logger receives the resets made from the key inspector and store
	// failures; slog.Default() when nil.
	Logger *slog.Logger
}

// dashboard holds what the handlers share. It is immutable after New, but
// for the sandbox, which locks itself.
type dashboard struct {
	svc     *service.Service
	opts    Options
	admin   *httpx.AdminGate
	static  fs.FS
	etags   map[string]string
	sims    *sim.Simulators
	streams atomic.Int64 // overview streams open now
}

// New returns the dashboard's handler over svc. It answers "/", the page's
// assets under /ui/ and its JSON endpoints under /ui/api/, and 404 for any
// other path. It fails if svc is nil or an option is negative.
func New(svc *service.Service, opts Options) (http.Handler, error) {
	if svc == nil {
		return nil, errors.New("web: New: service is nil")
	}
	if opts.StreamInterval < 0 || opts.MaxSessions < 0 || opts.SessionIdle < 0 {
		return nil, errors.New("web: New: StreamInterval, MaxSessions and SessionIdle must not be negative")
	}
	opts = withDefaults(opts)
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	etags, err := hashAssets(static)
	if err != nil {
		return nil, err
	}
	gate := opts.AdminGate
	if gate == nil {
		tokens, err := httpx.WithAdminToken(opts.AdminTokens, "", opts.AdminToken)
		if err != nil {
			return nil, fmt.Errorf("web: %w", err)
		}
		gate = httpx.NewAdminGate(tokens, opts.AdminFromAnywhere, nil)
	}
	d := &dashboard{svc: svc, opts: opts, admin: gate, static: static, etags: etags}
	if d.sims, err = sim.New(sim.Options{Clock: opts.Clock, MaxSessions: opts.MaxSessions, SessionIdle: opts.SessionIdle}); err != nil {
		return nil, err
	}
	return d.routes(), nil
}

func withDefaults(o Options) Options {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.StreamInterval == 0 {
		o.StreamInterval = DefaultStreamInterval
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.SessionIdle == 0 {
		o.SessionIdle = DefaultSessionIdle
	}
	return o
}

func (d *dashboard) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.page)
	mux.HandleFunc("GET /ui/{file}", d.asset)
	for _, e := range []struct {
		method, path string
		handler      http.HandlerFunc
	}{
		{http.MethodGet, "/ui/api/overview", d.overview},
		{http.MethodGet, "/ui/api/overview/stream", d.overviewStream},
		{http.MethodGet, "/ui/api/limits", d.limits},
		{http.MethodPost, "/ui/api/inspect", d.admin.Wrap("the key inspector's endpoints", d.inspect)},
		{http.MethodPost, "/ui/api/reset", d.admin.Wrap("the key inspector's endpoints", httpx.ResetHandler(d.svc, d.opts.Logger, maxBodyBytes))},
		{http.MethodPost, "/ui/api/sim/window", d.sims.Window},
		{http.MethodPost, "/ui/api/sim/bucket", d.sims.Bucket},
		{http.MethodPost, "/ui/api/sim/race", d.sims.Race},
		{http.MethodPost, "/ui/api/sim/compare", d.sims.Compare},
	} {
		mux.HandleFunc(e.method+" "+e.path, e.handler)
		mux.HandleFunc(e.path, methodNotAllowed(e.method))
	}
	mux.HandleFunc("/ui/api/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteError(w, &httpx.Error{Status: http.StatusNotFound, Field: "path", Message: "no dashboard endpoint " + r.URL.Path})
	})
	mux.HandleFunc("/", http.NotFound)
	return secure(mux)
}

// methodNotAllowed answers 405 naming the method the endpoint takes.
func methodNotAllowed(method string) http.HandlerFunc {
	allow := method
	if method == http.MethodGet {
		allow = "GET, HEAD"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		httpx.WriteError(w, &httpx.Error{Status: http.StatusMethodNotAllowed, Field: "method", Message: r.Method + " is not allowed on " + r.URL.Path + "; use " + allow})
	}
}

// contentPolicy lets the page load only its own assets and talk only to its
// own server.
const contentPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// secure sets the headers every answer carries.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", contentPolicy)
		next.ServeHTTP(w, r)
	})
}

// page serves the dashboard's one HTML page.
func (d *dashboard) page(w http.ResponseWriter, r *http.Request) {
	d.serveAsset(w, r, "index.html")
}

// asset serves /ui/<file>: the page's script, style sheet and icon.
func (d *dashboard) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name == "index.html" || d.etags[name] == "" {
		http.NotFound(w, r)
		return
	}
	d.serveAsset(w, r, name)
}

// serveAsset answers an embedded file with a strong ETag, so that browsers
// revalidate (Cache-Control: no-cache) and get 304 until the binary changes.
func (d *dashboard) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	data, err := fs.ReadFile(d.static, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", d.etags[name])
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(data))
}

// hashAssets returns each asset's ETag: a quoted prefix of its SHA-256.
func hashAssets(static fs.FS) (map[string]string, error) {
	out := map[string]string{}
	err := fs.WalkDir(static, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := fs.ReadFile(static, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		out[path.Base(p)] = `"` + hex.EncodeToString(sum[:12]) + `"`
		return nil
	})
	return out, err
}
