package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/tokenlimit/tokenlimit/tokenizer"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/proxy"
	"github.com/tokenlimit/tokenlimit/service"
)

// proxyFlags are proxy's options.
type proxyFlags struct {
	storeFlags
	logFlags
	config           string
	upstream         string
	anthropic        string
	upstreamKey      string
	listen           string
	metricsListen    string
	unknownKeys      string
	trustedProxies   []string
	authFailures     string
	defaultMaxTokens int64
	maxBodyBytes     int64
	maxResponseBytes int64
	maxRetryWait     time.Duration
	upstreamTimeout  time.Duration
	reloadEvery      time.Duration
	adminToken       string
	adminAnywhere    bool
}

// proxyCommand is `tokenlimit proxy`: the OpenAI-compatible LLM proxy.
func proxyCommand() *cobra.Command {
	var f proxyFlags
	cmd := &cobra.Command{
		Use:   "proxy --config FILE --upstream URL",
		Short: "Run an OpenAI-compatible proxy that limits LLM calls by the tokens they use",
		Long: `Run a reverse proxy in front of an OpenAI-compatible API. Each call to
/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses or
Anthropic's /v1/messages reserves
its estimated tokens (prompt + max_tokens) on every limit of the configuration
it selects, is forwarded only if all of them admit it, and is settled to the
usage the upstream reports. Other paths pass through under request-count
limits. With no --redis it runs on the embedded in-memory store.
docs/proxy.md walks through it.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runProxy(cmd.Context(), f, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "configuration file, such as examples/proxy.yaml (required)")
	fl.StringVar(&f.upstream, "upstream", "", "the OpenAI-compatible API to forward to, such as https://api.openai.com (required)")
	fl.StringVar(&f.anthropic, "anthropic-upstream", "", "where Anthropic Messages API calls (/v1/messages, and requests with an anthropic-version header) go, such as https://api.anthropic.com (empty: --upstream)")
	fl.StringVar(&f.upstreamKey, "upstream-key", "", "api key sent upstream in place of the client's (empty: $TOKENLIMIT_UPSTREAM_KEY if set, else forward the client's key; a quota-plane key's secret is never forwarded)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8090", "address clients call, as base URL http://ADDR/v1")
	fl.StringVar(&f.metricsListen, "metrics-listen", "", "address serving Prometheus /metrics (empty: off)")
	f.storeFlags.register(fl)
	f.logFlags.register(fl)
	fl.StringVar(&f.unknownKeys, "unknown-keys", "reject", "api keys missing from api_keys (and calls without one): reject (401), or default: the default_plan, all of them sharing the budgets of the one api_key \"unknown\"")
	fl.StringSliceVar(&f.trustedProxies, "trusted-proxy", nil, "CIDR whose X-Forwarded-For is believed for the client ip (repeatable)")
	fl.StringVar(&f.authFailures, "auth-failures", "10/min", authFailuresHelp)
	fl.Int64Var(&f.defaultMaxTokens, "default-max-tokens", proxy.DefaultMaxTokens, "reply tokens reserved for a call that sets no max_tokens (capped at the smallest token budget)")
	fl.Int64Var(&f.maxBodyBytes, "max-body-bytes", proxy.DefaultMaxBodyBytes, "largest request body the proxy reads and counts (413 above)")
	fl.Int64Var(&f.maxResponseBytes, "max-response-bytes", proxy.DefaultMaxResponseBytes, "largest plain response buffered to read its usage; a larger one streams through and settles at the estimate")
	fl.DurationVar(&f.maxRetryWait, "max-retry-wait", proxy.DefaultMaxRetryWait, "longest wait a 429 asks clients to retry after; a longer one (a used-up daily budget) says not to retry: x-should-retry: false, code insufficient_quota, no retry-after-ms")
	fl.DurationVar(&f.upstreamTimeout, "upstream-timeout", 10*time.Minute, "how long to wait for the upstream's response headers; past it the call is refunded with 504")
	fl.DurationVar(&f.reloadEvery, "reload-every", 2*time.Second, "how often to look for a changed --config file (0: only on SIGHUP)")
	fl.StringVar(&f.adminToken, "admin-token", "", "for the quota plane's /v1/admin/teams and /v1/admin/keys, "+adminTokenHelp)
	fl.BoolVar(&f.adminAnywhere, "admin-from-anywhere", false, "let /v1/admin/* answer clients that are not on loopback (they still need the token)")
	return cmd
}

// runProxy serves the proxy until ctx ends, then shuts down gracefully.
func runProxy(ctx context.Context, f proxyFlags, out io.Writer) error {
	log, err := f.logger(out)
	if err != nil {
		return err
	}
	if f.config == "" {
		return fmt.Errorf("--config: a configuration file is required, such as examples/proxy.yaml: %w", errUsage)
	}
	if f.maxRetryWait <= 0 {
		return fmt.Errorf("--max-retry-wait: want a positive duration such as 60s, got %v: %w", f.maxRetryWait, errUsage)
	}
	if err := f.storeFlags.validate(f.reloadEvery); err != nil {
		return err
	}
	upstream, err := parseUpstream("--upstream", f.upstream)
	if err != nil {
		return err
	}
	var anthropic *url.URL
	if f.anthropic != "" {
		if anthropic, err = parseUpstream("--anthropic-upstream", f.anthropic); err != nil {
			return err
		}
	}
	file := &configFile{path: f.config}
	cfg, err := file.load()
	if err != nil {
		return err
	}
	unknown, err := unknownKeysPolicy(f.unknownKeys)
	if err != nil {
		return err
	}
	proxies, err := parsePrefixes(f.trustedProxies)
	if err != nil {
		return err
	}
	authFailures, err := authFailuresLimit(f.authFailures)
	if err != nil {
		return err
	}
	tr, err := startTracing(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing(tr, log)
	svc, pl, reg, closeStore, err := newService(cfg, f.storeFlags, tr, log)
	if err != nil {
		return err
	}
	defer closeStore()
	log.Info("starting", "config", cfg.Source, "limits", len(cfg.Limits), "store", svc.Health().Store)
	tok := tokenizer.New()
	if err := tok.Preload(tokenizer.O200kBase, tokenizer.CL100kBase); err != nil {
		return err
	}
	metrics, err := proxy.NewMetrics(reg)
	if err != nil {
		return err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.ResponseHeaderTimeout = f.upstreamTimeout
	p, err := proxy.New(svc, proxy.Options{
		Upstream: upstream, AnthropicUpstream: anthropic, Transport: tr.transport(transport), UpstreamAPIKey: upstreamKey(f.upstreamKey), UnknownKeys: unknown,
		TrustedProxies: proxies, DefaultMaxTokens: f.defaultMaxTokens, MaxBodyBytes: f.maxBodyBytes, MaxResponseBytes: f.maxResponseBytes,
		MaxRetryWait: f.maxRetryWait, AuthFailures: authFailures, Tokenizer: tok, Logger: log, Metrics: metrics,
	})
	if err != nil {
		return err
	}
	f.upstream = upstream.Redacted() // for the log: no password
	tokens, err := serverAdminTokens(f.adminToken, log)
	if err != nil {
		return err
	}
	admin := httpx.PlaneAdmin{Plane: pl, Service: svc, Gate: tokens.newGate(svc, f.adminAnywhere, authFailures), Log: log, MaxBody: f.maxBodyBytes}
	go tokens.watch(ctx, f.reloadEvery)
	return serveProxy(ctx, log, f, file, svc, tr.handler(withAdmin(p, admin)), promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
}

// withAdmin serves the quota plane's admin routes beside the proxy, and
// answers 404 for any other path under /v1/admin/ rather than forwarding it
// upstream.
func withAdmin(p http.Handler, admin httpx.PlaneAdmin) http.Handler {
	mux := http.NewServeMux()
	for _, r := range admin.Routes() {
		for _, m := range r.Methods {
			mux.Handle(m+" "+r.Path, r.Handler)
		}
	}
	mux.HandleFunc("/v1/admin/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteError(w, &httpx.Error{Status: http.StatusNotFound, Field: "path", Message: "no admin endpoint " + r.Method + " " + r.URL.Path + "; see docs/api.md"})
	})
	mux.Handle("/", p)
	return mux
}

// parseUpstream reads the base URL of an upstream API given with flag.
func parseUpstream(flag, s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if s == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s %q: want the API's base URL, such as https://api.openai.com: %w", flag, s, errUsage)
	}
	return u, nil
}

// unknownKeysPolicy reads --unknown-keys; empty is reject: an unknown key
// is served only when the operator asks for it.
func unknownKeysPolicy(s string) (proxy.UnknownKeys, error) {
	switch s {
	case "reject", "":
		return proxy.RejectUnknownKeys, nil
	case "default":
		return proxy.DefaultPlanForUnknownKeys, nil
	}
	return 0, fmt.Errorf("--unknown-keys %q: want reject or default: %w", s, errUsage)
}

// upstreamKey returns --upstream-key, or $TOKENLIMIT_UPSTREAM_KEY when the
// flag is empty. The variable is read here, not as the flag's default, so
// that --help never prints the secret.
func upstreamKey(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv("TOKENLIMIT_UPSTREAM_KEY")
}

// serveProxy serves p (and /metrics if asked) until ctx ends; in-flight
// calls, streams included, get 30 seconds to finish.
func serveProxy(ctx context.Context, log *slog.Logger, f proxyFlags, file *configFile, svc *service.Service, p http.Handler, metrics http.Handler) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { cancel(ignoreClosed(srv.Serve(ln))) }()
	log.Info("proxying", "addr", ln.Addr().String(), "upstream", f.upstream, "store", svc.Health().Store)
	if f.metricsListen != "" {
		mln, err := net.Listen("tcp", f.metricsListen)
		if err != nil {
			srv.Close()
			return fmt.Errorf("--metrics-listen %s: %w", f.metricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics)
		msrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { cancel(ignoreClosed(msrv.Serve(mln))) }()
		defer msrv.Close()
		log.Info("serving metrics", "addr", mln.Addr().String())
	}
	go file.watch(ctx, f.reloadEvery, svc)
	<-ctx.Done()
	log.Info("shutting down")
	shutdownCtx, done := context.WithTimeout(context.Background(), 30*time.Second)
	defer done()
	err = srv.Shutdown(shutdownCtx)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}
