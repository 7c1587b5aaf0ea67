package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/alert"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/gcfloor"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/logging"
	"github.com/tokenlimit/tokenlimit/internal/snapshot"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/plane/redisplane"
	"github.com/tokenlimit/tokenlimit/resilient"
	"github.com/tokenlimit/tokenlimit/server/httpapi"
	"github.com/tokenlimit/tokenlimit/server/rlsv3"
	"github.com/tokenlimit/tokenlimit/service"
	"github.com/tokenlimit/tokenlimit/web"
)

// storeFlags choose where budgets live; serve and proxy share them.
type storeFlags struct {
	redis        string
	storeTimeout time.Duration
	maxKeys      int
	dataDir      string
	failOpenKeys int
}

// logFlags choose what is logged and how; serve and proxy share them.
type logFlags struct {
	logLevel  string
	logFormat string
}

func (f *logFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.logLevel, "log-level", "info", "least severe level logged: debug (every decision), info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "json", "log lines as json (one object a line) or text (key=value)")
}

// logger is the logger the flags ask for, writing to out.
func (f logFlags) logger(out io.Writer) (*slog.Logger, error) {
	log, err := logging.New(out, f.logLevel, f.logFormat)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, errUsage)
	}
	return log, nil
}

func (f *storeFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.redis, "redis", "", "Redis URL, e.g. redis://127.0.0.1:6379/0 (?addr=host:port repeated for Cluster, ?master_set=name for Sentinel), shared by every replica (default $TOKENLIMIT_REDIS_URL; empty: the embedded store)")
	fl.DurationVar(&f.storeTimeout, "store-timeout", resilient.DefaultTimeout, "timeout of each Redis call; past it, limits follow their failure mode")
	fl.IntVar(&f.maxKeys, "max-keys", memstore.DefaultMaxKeys, "most live keys in the embedded store")
	fl.IntVar(&f.failOpenKeys, "fail-open-keys", resilient.DefaultBound, "most fail-open budgets whose last Redis answer is remembered (about 150 bytes plus the key each), so that while Redis is down each starts its local budget where Redis left it; past it the one whose use ends first among a sample is forgotten")
	fl.StringVar(&f.dataDir, "data-dir", "", "directory where the embedded store keeps the quota plane's teams and keys and a snapshot of its budgets live a minute or more, written every 5 s and at shutdown (empty: in memory only; with --redis both live in Redis)")
}

// serviceOptions are the service's options the flags set: the store's
// timeout and the fail-open memory's bound.
func (f storeFlags) serviceOptions() service.Options {
	return service.Options{StoreTimeout: f.storeTimeout, FailOpenKeys: f.failOpenKeys}
}

// validate refuses values that cannot work, naming the flag: a timeout or
// a bound of zero or less, and a negative reloadEvery (--reload-every, of
// the command that has the store flags; 0 turns the polling off).
func (f *storeFlags) validate(reloadEvery time.Duration) error {
	if f.storeTimeout <= 0 {
		return fmt.Errorf("--store-timeout: must be positive, got %s: %w", f.storeTimeout, errUsage)
	}
	if f.maxKeys <= 0 {
		return fmt.Errorf("--max-keys: must be positive, got %d: %w", f.maxKeys, errUsage)
	}
	if f.failOpenKeys <= 0 {
		return fmt.Errorf("--fail-open-keys: must be positive, got %d: %w", f.failOpenKeys, errUsage)
	}
	if reloadEvery < 0 {
		return fmt.Errorf("--reload-every: must not be negative (0: only on SIGHUP), got %s: %w", reloadEvery, errUsage)
	}
	return nil
}

// defaultGCHeapFloor is --gc-heap-floor's default, in MiB. A service on
// Redis keeps a few MiB live and allocates a few kB per decision; left to
// Go's default it collects whenever the heap doubles, tens of times a
// second under load, and each collection costs every goroutine's stack
// scan. With the floor it collects a few times a second, for at most this
// much more memory.
const defaultGCHeapFloor = 64

// serveFlags are serve's options.
type serveFlags struct {
	storeFlags
	logFlags
	config         string
	listen         string
	grpcListen     string
	pprofListen    string
	gcHeapFloor    int // MiB
	adminToken     string
	adminAnywhere  bool
	authFailures   string
	trustedProxies []string
	reloadEvery    time.Duration
	envoyConfig    string        // --envoy-config: the envoyproxy/ratelimit compatibility mode
	envoyEnv       bool          // --envoy-env
	envoy          envoySettings // from --envoy-env
	envoyFailure   []string      // --envoy-failure-mode
}

func serveCommand() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the rate-limit service (HTTP API, Envoy RLS gRPC, metrics, dashboard)",
		Long: `Run the rate-limit service. With no --redis it runs on the embedded
in-memory store; with --redis every decision is one atomic Lua script on Redis.
The configuration reloads on SIGHUP and when the file changes; a bad file is
rejected and the running limits stay.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.envoyEnv {
				if err := applyEnvoyEnv(&f, cmd.Flags(), os.Getenv); err != nil {
					return fmt.Errorf("--envoy-env: %w", err)
				}
			}
			if err := f.storeFlags.validate(f.reloadEvery); err != nil {
				return err
			}
			if f.gcHeapFloor < 0 {
				return fmt.Errorf("--gc-heap-floor: must not be negative, got %d: %w", f.gcHeapFloor, errUsage)
			}
			if os.Getenv("GOGC") == "" {
				defer gcfloor.Start(uint64(f.gcHeapFloor) << 20).Stop()
			}
			if f.envoyConfig != "" {
				if cmd.Flags().Changed("config") {
					return fmt.Errorf("--config and --envoy-config: give one, --envoy-config DIR is the whole configuration: %w", errUsage)
				}
				return serveEnvoy(cmd.Context(), f, cmd.OutOrStdout())
			}
			return serve(cmd.Context(), f, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "configuration file (default: the built-in examples/quickstart.yaml)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8080", "HTTP address: API, /metrics, health, dashboard")
	fl.StringVar(&f.grpcListen, "grpc-listen", "127.0.0.1:8081", "gRPC address for Envoy's rate limit service (empty: off)")
	fl.StringVar(&f.pprofListen, "pprof-listen", "", "address for /debug/pprof (empty: off; keep it on loopback)")
	fl.IntVar(&f.gcHeapFloor, "gc-heap-floor", defaultGCHeapFloor, "MiB the heap may grow to before the garbage collector runs, while the live heap is small (0: Go's default, a collection each time the heap doubles; ignored when GOGC is set)")
	f.storeFlags.register(fl)
	f.logFlags.register(fl)
	fl.BoolVar(&f.adminAnywhere, "admin-from-anywhere", false, "let /v1/admin/* answer clients that are not on loopback (they still need the token)")
	fl.StringVar(&f.adminToken, "admin-token", "", "for /v1/admin/*, "+adminTokenHelp)
	fl.StringVar(&f.authFailures, "auth-failures", "10/min", authFailuresHelp)
	fl.StringSliceVar(&f.trustedProxies, "trusted-proxy", []string{"127.0.0.0/8", "::1/128"}, "CIDR whose X-Forwarded-For forward-auth believes (repeatable; replaces the default, loopback: a gateway on this host)")
	fl.DurationVar(&f.reloadEvery, "reload-every", 2*time.Second, "how often to look for a changed --config file or --envoy-config directory (0: only on SIGHUP)")
	fl.StringVar(&f.envoyConfig, "envoy-config", "", "directory of envoyproxy/ratelimit *.yaml files: answer as envoyproxy/ratelimit does (see docs/rls.md)")
	fl.StringSliceVar(&f.envoyFailure, "envoy-failure-mode", nil, "compatibility mode: what a descriptor answers while Redis fails: MODE for every descriptor, DOMAIN=MODE for a domain's, PATH=MODE for a descriptor of the configuration and those nested in it (PATH as envoyproxy/ratelimit's statistics name it: DOMAIN.KEY or DOMAIN.KEY_VALUE, then .KEY[_VALUE] per level); the most specific wins; repeatable. MODE is error (the RLS call fails and Envoy's filter decides, as envoyproxy/ratelimit; the default), closed (OVER_LIMIT) or open (OK, counting nothing); see docs/operations.md")
	fl.BoolVar(&f.envoyEnv, "envoy-env", false, "read envoyproxy/ratelimit's environment variables (RUNTIME_ROOT, REDIS_URL, GRPC_PORT, PORT, LOG_LEVEL, ...); implies the compatibility mode")
	return cmd
}

func serve(ctx context.Context, f serveFlags, out io.Writer) error {
	log, err := f.logger(out)
	if err != nil {
		return err
	}
	tokens, err := serverAdminTokens(f.adminToken, log)
	if err != nil {
		return err
	}
	authFailures, err := authFailuresLimit(f.authFailures)
	if err != nil {
		return err
	}
	file := &configFile{path: f.config}
	cfg, err := file.load()
	if err != nil {
		return err
	}
	proxies, err := parsePrefixes(f.trustedProxies)
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
	gate := tokens.newGate(svc, f.adminAnywhere, authFailures)
	go tokens.watch(ctx, f.reloadEvery)
	dashboard, err := web.New(svc, web.Options{AdminGate: gate, Stats: svc.Stats(), Done: ctx.Done()})
	if err != nil {
		return err
	}
	handler, err := httpapi.New(svc, httpapi.Options{
		AdminGate: gate, AuthFailures: gate.Failures(), TrustedProxies: proxies, Logger: log, Dashboard: dashboard, Plane: pl,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
	})
	if err != nil {
		return err
	}
	return run(ctx, log, f, file, svc, gate.Failures(), tr.handler(handler), tr.grpcOptions()...)
}

// run serves until ctx ends, then shuts everything down gracefully.
// failures counts the RLS API's refused plane secrets (nil: not counted);
// grpcOpts are the gRPC server's options beyond listenGRPC's.
func run(ctx context.Context, log *slog.Logger, f serveFlags, file *configFile, svc *service.Service, failures *httpx.AuthFailures, handler http.Handler, grpcOpts ...grpc.ServerOption) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	httpLn, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	// No WriteTimeout: the dashboard streams server-sent events.
	httpSrv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { cancel(ignoreClosed(httpSrv.Serve(httpLn))) }()
	log.Info("serving HTTP", "addr", httpLn.Addr().String(), "store", svc.Health().Store)

	var grpcSrv *grpc.Server
	if f.grpcListen != "" {
		if grpcSrv, err = serveGRPC(f.grpcListen, svc, failures, log, cancel, grpcOpts...); err != nil {
			return err
		}
	}
	if f.pprofListen != "" {
		pprofSrv, err := servePprof(f.pprofListen, log, cancel)
		if err != nil {
			return err
		}
		defer pprofSrv.Close()
	}
	go file.watch(ctx, f.reloadEvery, svc)
	<-ctx.Done()
	log.Info("shutting down")
	return shutdown(ctx, httpSrv, grpcSrv)
}

// shutdown stops the servers once ctx (the serve's context) has ended:
// HTTP gracefully within 10 s, gRPC gracefully. It returns the cause that
// ended ctx unless that was a plain cancellation, else the HTTP shutdown's
// error.
func shutdown(ctx context.Context, httpSrv *http.Server, grpcSrv *grpc.Server) error {
	shutdownCtx, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	err := httpSrv.Shutdown(shutdownCtx)
	if grpcSrv != nil {
		grpcSrv.GracefulStop()
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// serveGRPC serves the Rate Limit Service, health and reflection; health
// says NOT_SERVING while the store is degraded, as /readyz answers 503.
func serveGRPC(addr string, svc *service.Service, failures *httpx.AuthFailures, log *slog.Logger, fail context.CancelCauseFunc, opts ...grpc.ServerOption) (*grpc.Server, error) {
	ready := func(context.Context) bool { return !svc.Health().Degraded }
	return listenGRPC(addr, log, fail, ready, func(s *grpc.Server) error {
		return rlsv3.Register(s, svc, rlsv3.Options{Logger: log, AuthFailures: failures})
	}, opts...)
}

func servePprof(addr string, log *slog.Logger, fail context.CancelCauseFunc) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { fail(ignoreClosed(srv.Serve(ln))) }()
	log.Info("serving pprof", "addr", ln.Addr().String())
	return srv, nil
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

func parsePrefixes(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("--trusted-proxy %q: want a CIDR such as 10.0.0.0/8: %w", c, errUsage)
		}
		out = append(out, p)
	}
	return out, nil
}

// newService opens the store and builds the service on it, with a metrics
// registry holding the service's metrics and Go's. Call the returned
// function to close the store. With tracing (not nil) the decisions and
// the store calls are traced.
func newService(cfg *config.Config, f storeFlags, tr *tracing, log *slog.Logger) (*service.Service, *plane.Plane, *prometheus.Registry, func(), error) {
	store, closeStore, err := openStore(f, log)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	named, closeNamed, err := openNamedStores(cfg.Stores, log)
	if err != nil {
		closeStore()
		return nil, nil, nil, nil, err
	}
	for name, ns := range named {
		ns.Store = tr.store(ns.Store)
		named[name] = ns
	}
	closeStore = func(closeMain func()) func() { return func() { closeNamed(); closeMain() } }(closeStore)
	var svc *service.Service
	pl, closePlane, err := openPlane(f, store, func() *service.Service { return svc }, log)
	if err != nil {
		closeStore()
		return nil, nil, nil, nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := f.serviceOptions()
	opts.Store, opts.Stores, opts.Registerer, opts.Logger, opts.Plane, opts.Tracer = tr.store(store), named, reg, log, pl, tr.serviceTracer()
	opts.Alerts = alert.Options{Webhook: cfg.Alerts.Webhook, Secret: []byte(os.Getenv(cfg.Alerts.SecretEnv))}
	svc, err = service.New(cfg, opts)
	if err != nil {
		closePlane()
		closeStore()
		return nil, nil, nil, nil, err
	}
	return svc, pl, reg, func() { svc.Close(); closePlane(); closeStore() }, nil
}

// openPlane opens the quota plane where the budgets are: in Redis beside
// them, else in --data-dir (durable), else in memory; it follows the
// plane's writes until the returned close. svc returns the service whose
// plans and limits the plane's writes are checked against (called only
// once writes come, after the service exists).
func openPlane(f storeFlags, store tokenlimit.Store, svc func() *service.Service, log *slog.Logger) (*plane.Plane, func(), error) {
	var ps plane.Store
	closeFile := func() {}
	conn, onRedis := store.(*redisConn) // --redis or $TOKENLIMIT_REDIS_URL
	switch {
	case onRedis && f.dataDir != "":
		return nil, nil, fmt.Errorf("--data-dir: with --redis the plane lives in Redis; give one: %w", errUsage)
	case onRedis:
		ps = redisplane.New(conn.rueidis, redisplane.Options{})
	case f.dataDir != "":
		fs, err := plane.OpenFileStore(f.dataDir, log)
		if err != nil {
			return nil, nil, fmt.Errorf("--data-dir: %w", err)
		}
		ps, closeFile = fs, func() { fs.Close() }
	default:
		ps = plane.NewMemoryStore()
	}
	ctx, cancel := context.WithCancel(context.Background())
	pl, err := plane.Open(ctx, ps, plane.Options{Logger: log,
		KnownPlan: func(name string) bool { return svc().KnownPlan(name) },
		PlanLimit: func(plan, name string) bool { return svc().PlanLimit(plan, name) }})
	if err != nil {
		cancel()
		closeFile()
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() { defer close(done); pl.Run(ctx) }()
	return pl, func() { cancel(); <-done; closeFile() }, nil
}

// keepBudgets restores the embedded store's long budgets from dir's
// snapshot and writes them there every snapshot.DefaultInterval until the
// returned stop, which writes them once more (a graceful shutdown loses
// nothing; a crash at most one interval).
func keepBudgets(st *memstore.Store, dir string, log *slog.Logger) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	o := snapshot.Options{Path: filepath.Join(dir, snapshot.FileName), Logger: log}
	snapshot.Restore(st, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); snapshot.Run(ctx, st, o) }()
	return func() { cancel(); <-done }, nil
}

// openNamedStores connects to each store of stores: in the background, as
// --redis does; the returned function closes them all.
func openNamedStores(stores map[string]config.Store, log *slog.Logger) (map[string]service.NamedStore, func(), error) {
	out := map[string]service.NamedStore{}
	var conns []*redisConn
	closeAll := func() {
		for _, c := range conns {
			c.close()
		}
	}
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		st := stores[name]
		conn, err := dialNamedRedis(name, st, log.With("store", name))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, conn)
		out[name] = service.NamedStore{Store: conn, Timeout: st.Timeout}
	}
	return out, closeAll, nil
}

// openStore returns the embedded store, or (--redis, else
// $TOKENLIMIT_REDIS_URL) a Redis store through rueidis
// (see docs/dependencies.md for why rueidis) that connects in the
// background: an unreachable Redis does not keep the process from starting.
// The store describes itself (tokenlimit.Describe).
func openStore(f storeFlags, log *slog.Logger) (tokenlimit.Store, func(), error) {
	if f.redis == "" { // read here, not as the flag's default: the URL may hold a password, which --help would print
		f.redis = os.Getenv("TOKENLIMIT_REDIS_URL")
	}
	if f.redis == "" {
		st, err := memstore.New(memstore.Options{MaxKeys: f.maxKeys})
		if err != nil {
			return nil, nil, fmt.Errorf("--max-keys: %w", err)
		}
		if f.dataDir == "" {
			return st, func() {}, nil
		}
		stop, err := keepBudgets(st, f.dataDir, log)
		if err != nil {
			return nil, nil, err
		}
		return st, stop, nil
	}
	conn, err := dialRedis(f.redis, log)
	if err != nil {
		return nil, nil, err
	}
	return conn, conn.close, nil
}
