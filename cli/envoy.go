package cli

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/envoycompat"
	"github.com/tokenlimit/tokenlimit/internal/breaker"
	"github.com/tokenlimit/tokenlimit/resilient"
	"github.com/tokenlimit/tokenlimit/server/rlsv3"
)

// envoySettings are the envoyproxy/ratelimit settings the compatibility
// mode honours, from its environment variables (--envoy-env) or defaults.
type envoySettings struct {
	load   envoycompat.LoadOptions
	engine envoycompat.Options
}

// envoyDir is a directory of envoyproxy/ratelimit files and the digest of
// the names and contents last read from it, so a change is noticed once.
type envoyDir struct {
	path string
	opts envoycompat.LoadOptions
	last [sha256.Size]byte
}

func (d *envoyDir) digest() ([sha256.Size]byte, error) {
	files, err := envoycompat.ConfigFiles(d.path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	h := sha256.New()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return [sha256.Size]byte{}, err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(data))
		h.Write(data)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, nil
}

// load reads the directory and remembers its digest.
func (d *envoyDir) load() (*envoycompat.Config, error) {
	sum, err := d.digest()
	if err != nil {
		return nil, err
	}
	cfg, err := envoycompat.Load(d.path, d.opts)
	if err != nil {
		return nil, err
	}
	d.last = sum
	return cfg, nil
}

func (d *envoyDir) changed() bool {
	sum, err := d.digest()
	return err == nil && sum != d.last
}

// watch reloads the configuration into e on SIGHUP and, every interval (0:
// never), when a file changed, was added or removed, counting each reload
// in reloads by result (ok, error). A bad configuration is logged and the
// running one stays.
func (d *envoyDir) watch(ctx context.Context, every time.Duration, e *envoycompat.Engine, reloads *prometheus.CounterVec, log *slog.Logger) {
	watchReloads(ctx, every, d.changed, func() {
		cfg, err := d.load()
		if err == nil {
			if err = e.SetConfig(cfg); err != nil {
				err = fmt.Errorf("--envoy-failure-mode %w", err)
			}
		}
		if err != nil {
			reloads.WithLabelValues("error").Inc()
			log.Error("envoy config rejected; the running limits stay", "dir", d.path, "error", err)
			return
		}
		reloads.WithLabelValues("ok").Inc()
		log.Info("envoy config reloaded", "dir", d.path, "domains", len(cfg.Domains()), "limits", len(cfg.Limits))
	})
}

// envoyMetrics is the registry of the compatibility mode's /metrics: Go's
// and the process's metrics, the breaker's state and the configuration
// reloads (returned, for watch); the engine adds its own.
func envoyMetrics(guarded *resilient.Store) (*prometheus.Registry, *prometheus.CounterVec) {
	reg := prometheus.NewRegistry()
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tokenlimit_config_reloads_total",
		Help: "Configuration reloads by result (ok, error).",
	}, []string{"result"})
	reloads.WithLabelValues("ok")
	reloads.WithLabelValues("error")
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), guarded.BreakerGauge(nil), reloads)
	return reg, reloads
}

// serveEnvoy runs the envoyproxy/ratelimit compatibility mode: the RLS on
// the gRPC address, POST /json and GET /healthcheck on the HTTP address.
func serveEnvoy(ctx context.Context, f serveFlags, out io.Writer) error {
	log, err := f.logger(out)
	if err != nil {
		return err
	}
	dir := &envoyDir{path: f.envoyConfig, opts: f.envoy.load}
	cfg, err := dir.load()
	if err != nil {
		return err
	}
	opts := f.envoy.engine
	if opts.FailureModes, err = parseFailureModes(f.envoyFailure, cfg); err != nil {
		return err
	}
	store, closeStore, err := openStore(f.storeFlags, log)
	if err != nil {
		return err
	}
	defer closeStore()
	warmUp(ctx, store, log)
	guarded, err := resilient.New(store, resilient.Options{Timeout: f.storeTimeout, OnBreaker: logBreaker(log), OnFull: logFull(log)})
	if err != nil {
		return err
	}
	reg, reloads := envoyMetrics(guarded)
	opts.Registerer = reg
	engine, err := envoycompat.New(guarded, cfg, opts)
	if err != nil {
		return err
	}
	ready := storeReady(guarded)
	mux := http.NewServeMux()
	mux.Handle("/json", rlsv3.JSONHandler(engine, log))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, r *http.Request) {
		if !ready(r.Context()) {
			http.Error(w, "store unavailable", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "OK")
	})
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	httpLn, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { cancel(ignoreClosed(httpSrv.Serve(httpLn))) }()
	log.Info("serving HTTP", "addr", httpLn.Addr().String(), "endpoints", "POST /json, GET /healthcheck, GET /metrics")
	var grpcSrv *grpc.Server
	if f.grpcListen != "" {
		grpcSrv, err = listenGRPC(f.grpcListen, log, cancel, ready, func(s *grpc.Server) error {
			return rlsv3.RegisterEnvoyCompat(s, engine, rlsv3.Options{Logger: log})
		})
		if err != nil {
			return err
		}
	}
	log.Info("serving envoyproxy/ratelimit compatibility mode", "config", dir.path, "domains", len(cfg.Domains()), "limits", len(cfg.Limits),
		"store", tokenlimit.Describe(store).Name)
	go dir.watch(ctx, f.reloadEvery, engine, reloads, log)
	<-ctx.Done()
	return shutdown(ctx, httpSrv, grpcSrv)
}

// warmUpTimeout is the time the first store call gets at start: on a fresh
// connection it dials and loads the scripts, which may take longer than a
// decision's --store-timeout.
const warmUpTimeout = time.Second

// warmUp makes one call to the store (a peek) so that the first request
// finds its connection and scripts ready; a store that does not answer is
// logged, and the requests follow their failure modes until it does.
func warmUp(ctx context.Context, store tokenlimit.Store, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	defer cancel()
	if err := resilient.Peek(ctx, store, time.Now()); err != nil {
		log.Warn("the store does not answer yet; domains follow their failure modes until it does", "error", err)
	}
}

// storeReady reports whether the store is healthy: its breaker closed and
// a peek answered within the store timeout. resilient.Store.Health probes
// only a store that failed or never answered; a drop-in replica may have no
// traffic to find out that its store went away, so a healthy-looking store
// is peeked too (through the breaker, which counts a failed peek).
func storeReady(store *resilient.Store) func(context.Context) bool {
	return func(ctx context.Context) bool {
		if h, probed := store.Health(ctx); h.Degraded || probed {
			return !h.Degraded
		}
		return resilient.Peek(ctx, store, time.Now()) == nil
	}
}

// logBreaker logs the store's breaker opening (error) and closing again
// (info); the half-open trials in between at debug.
func logBreaker(log *slog.Logger) func(from, to breaker.State, failures int) {
	return func(from, to breaker.State, failures int) {
		switch {
		case to == breaker.Open && from == breaker.Closed:
			log.Error("store circuit breaker opened: the store is failing; domains follow their failure modes", "failures", failures)
		case to == breaker.Closed:
			log.Info("store circuit breaker closed: the store answers again")
		default:
			log.Debug("store circuit breaker "+to.String(), "from", from.String())
		}
	}
}

// logFull logs the store filling up (error) and having room again (info),
// once each; the requests it refuses meanwhile (UNAVAILABLE) are logged at
// debug.
func logFull(log *slog.Logger) func(full bool) {
	return func(full bool) {
		if full {
			log.Error("the store is full: requests needing a new key fail (UNAVAILABLE) until keys expire; see --max-keys")
			return
		}
		log.Info("the store has room for new keys again")
	}
}

// parseFailureModes reads --envoy-failure-mode (MODE for every
// descriptor, PATH=MODE for a domain or a descriptor and those nested in
// it; see envoycompat.FailureModes) and checks that each path names a
// domain or a descriptor of cfg.
func parseFailureModes(flags []string, cfg *envoycompat.Config) (envoycompat.FailureModes, error) {
	modes, err := envoycompat.ParseFailureModes(flags)
	if err == nil {
		err = modes.Check(cfg)
	}
	if err != nil {
		return modes, fmt.Errorf("--envoy-failure-mode %w: %w", err, errUsage)
	}
	return modes, nil
}

// The envoyproxy/ratelimit settings --envoy-env reads, with its defaults.
const (
	envRuntimeRoot = "/srv/runtime_data/current"
	envAppDir      = "config"
	envRedisURL    = "/var/run/nutcracker/ratelimit.sock"
)

// applyEnvoyEnv sets serve's flags from envoyproxy/ratelimit's environment
// variables (read through getenv), leaving alone the flags given on the
// command line (changed). Settings that would change answers and that the
// compatibility mode does not implement are refused, naming the variable.
func applyEnvoyEnv(f *serveFlags, fl *pflag.FlagSet, getenv func(string) string) error {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var errs []error
	boolean := func(name string) bool {
		v := getenv(name)
		if v == "" {
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want true or false", name, v))
		}
		return b
	}
	for name, want := range map[string]string{"BACKEND_TYPE": "redis", "CONFIG_TYPE": "FILE"} {
		if v := getenv(name); v != "" && !strings.EqualFold(v, want) {
			errs = append(errs, fmt.Errorf("%s=%q: the compatibility mode supports only %s", name, v, want))
		}
	}
	for _, name := range []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "REDIS_PERSECOND", "RESPONSE_DYNAMIC_METADATA", "GRPC_SERVER_USE_TLS"} {
		if boolean(name) {
			errs = append(errs, fmt.Errorf("%s=true: not supported by the compatibility mode", name))
		}
	}
	if v := getenv("GRPC_UDS"); v != "" {
		errs = append(errs, fmt.Errorf("GRPC_UDS=%q: not supported; use GRPC_HOST and GRPC_PORT", v))
	}
	if !fl.Changed("envoy-config") {
		f.envoyConfig = filepath.Join(env("RUNTIME_ROOT", envRuntimeRoot), getenv("RUNTIME_SUBDIRECTORY"), env("RUNTIME_APPDIRECTORY", envAppDir))
	}
	if !fl.Changed("listen") {
		f.listen = net.JoinHostPort(env("HOST", "0.0.0.0"), env("PORT", "8080"))
	}
	if !fl.Changed("grpc-listen") {
		f.grpcListen = net.JoinHostPort(env("GRPC_HOST", "0.0.0.0"), env("GRPC_PORT", "8081"))
	}
	if !fl.Changed("redis") {
		u, err := envoyRedisURL(env("REDIS_SOCKET_TYPE", "unix"), env("REDIS_TYPE", "SINGLE"), env("REDIS_URL", envRedisURL), getenv("REDIS_AUTH"), boolean("REDIS_TLS"))
		if err != nil {
			errs = append(errs, err)
		}
		f.redis = u
	}
	if level, err := envoyLogLevel(env("LOG_LEVEL", "WARN")); err != nil {
		errs = append(errs, err)
	} else if !fl.Changed("log-level") {
		f.logLevel = level
	}
	if format := getenv("LOG_FORMAT"); format != "" && !fl.Changed("log-format") {
		f.logFormat = strings.ToLower(format)
	}
	f.envoy.load.MergeDomains = boolean("MERGE_DOMAIN_CONFIG")
	f.envoy.engine.KeyPrefix = getenv("CACHE_KEY_PREFIX")
	f.envoy.engine.GlobalShadowMode = boolean("SHADOW_MODE")
	f.envoy.engine.GlobalQuotaMode = boolean("QUOTA_MODE")
	if boolean("LIMIT_RESPONSE_HEADERS_ENABLED") {
		f.envoy.engine.Headers = &envoycompat.HeaderNames{
			Limit:     env("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
			Remaining: env("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
			Reset:     env("LIMIT_RESET_HEADER", "RateLimit-Reset"),
		}
	}
	return errors.Join(errs...)
}

// envoyRedisURL turns envoyproxy/ratelimit's Redis settings into the URL
// --redis takes. REDIS_URL is host:port (tcp) or a socket path (unix);
// for CLUSTER a comma-separated list of host:port; for SENTINEL the master
// set's name, then the sentinels' host:port, comma-separated. REDIS_AUTH is
// "password" or "user:password".
func envoyRedisURL(socket, typ, addr, auth string, tls bool) (string, error) {
	u := url.URL{Scheme: "redis"}
	if tls {
		u.Scheme = "rediss"
	}
	if auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			u.User = url.UserPassword(user, pass)
		} else {
			u.User = url.UserPassword("", auth)
		}
	}
	parts := strings.Split(addr, ",")
	q := url.Values{}
	switch strings.ToUpper(typ) {
	case "SINGLE":
		if len(parts) != 1 {
			return "", fmt.Errorf("REDIS_URL=%q: want one address for REDIS_TYPE=SINGLE", addr)
		}
	case "CLUSTER":
		for _, p := range parts[1:] {
			q.Add("addr", p)
		}
	case "SENTINEL":
		if len(parts) < 2 {
			return "", fmt.Errorf("REDIS_URL=%q: want MASTER_NAME,HOST:PORT[,HOST:PORT...] for REDIS_TYPE=SENTINEL", addr)
		}
		q.Set("master_set", parts[0])
		parts = parts[1:]
		for _, p := range parts[1:] {
			q.Add("addr", p)
		}
	default:
		return "", fmt.Errorf("REDIS_TYPE=%q: want SINGLE, SENTINEL or CLUSTER", typ)
	}
	switch strings.ToLower(socket) {
	case "tcp":
		u.Host = parts[0]
	case "unix":
		if strings.ToUpper(typ) != "SINGLE" {
			return "", fmt.Errorf("REDIS_SOCKET_TYPE=unix: only with REDIS_TYPE=SINGLE")
		}
		u.Scheme, u.Path = "unix", parts[0]
	default:
		return "", fmt.Errorf("REDIS_SOCKET_TYPE=%q: want tcp or unix", socket)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// envoyLogLevel maps LOG_LEVEL (logrus's names) to a --log-level.
func envoyLogLevel(s string) (string, error) {
	switch strings.ToLower(s) {
	case "trace", "debug":
		return "debug", nil
	case "info":
		return "info", nil
	case "warn", "warning":
		return "warn", nil
	case "error", "fatal", "panic":
		return "error", nil
	}
	return "", fmt.Errorf("LOG_LEVEL=%q: want debug, info, warn or error", s)
}

func validateEnvoy(out io.Writer, dir string, merge bool) error {
	cfg, err := envoycompat.Load(dir, envoycompat.LoadOptions{MergeDomains: merge})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: valid envoyproxy/ratelimit configuration, %s, %s, %s\n", dir, count(len(cfg.Files), "file"), count(len(cfg.Domains()), "domain"), count(len(cfg.Limits), "limit"))
	return nil
}

func migrateCommand() *cobra.Command {
	var dir string
	var merge bool
	cmd := &cobra.Command{
		Use:   "migrate --from-envoy DIR",
		Short: "Print the native configuration closest to an envoyproxy/ratelimit directory, and what only the compatibility mode has",
		Long: `Print, on stdout, the tokenlimit configuration equivalent to the
envoyproxy/ratelimit files in DIR where one exists, as YAML whose comments
name every feature that only the compatibility mode (serve --envoy-config DIR)
has. The global differences between the two modes are listed first.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("migrate: --from-envoy DIR is required: %w", errUsage)
			}
			cfg, err := envoycompat.Load(dir, envoycompat.LoadOptions{MergeDomains: merge})
			if err != nil {
				return err
			}
			m, err := envoycompat.Migrate(cfg)
			if err != nil {
				return err
			}
			return writeMigration(cmd.OutOrStdout(), dir, m)
		},
	}
	cmd.Flags().StringVar(&dir, "from-envoy", "", "directory of envoyproxy/ratelimit *.yaml files")
	cmd.Flags().BoolVar(&merge, "merge-domains", false, "let several files configure one domain (MERGE_DOMAIN_CONFIG)")
	return cmd
}

func writeMigration(w io.Writer, dir string, m envoycompat.Migration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Native tokenlimit limits closest to the envoyproxy/ratelimit configuration in %s.\n", dir)
	b.WriteString("# To keep envoyproxy/ratelimit's answers exactly, run `tokenlimit serve --envoy-config DIR` instead.\n#\n")
	b.WriteString("# Native mode differs everywhere in these points:\n")
	for _, d := range envoycompat.GlobalDifferences {
		fmt.Fprintf(&b, "#   - %s\n", d)
	}
	if len(m.CompatOnly) > 0 {
		b.WriteString("#\n# Only the compatibility mode has, in this configuration:\n")
		for _, n := range m.CompatOnly {
			fmt.Fprintf(&b, "#   - %s\n", n)
		}
	}
	if m.Limits == 0 {
		b.WriteString("#\n# No limit of this configuration has a native equivalent.\nlimits: []\n")
	} else {
		b.WriteString("\n")
		b.Write(m.YAML)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// envoyHint adds, to an error loading path as a native configuration, a
// pointer to --envoy-config when path is a directory or a file in
// envoyproxy/ratelimit's format.
func envoyHint(path string, err error) error {
	if err == nil {
		return nil
	}
	if st, serr := os.Stat(path); serr == nil && st.IsDir() {
		return fmt.Errorf("%w (a directory of envoyproxy/ratelimit files? use --envoy-config %s)", err, path)
	}
	data, rerr := os.ReadFile(path)
	if rerr == nil && envoyFormat.Match(data) {
		return fmt.Errorf("%w\n%s looks like an envoyproxy/ratelimit file: load its directory with --envoy-config %s", err, path, filepath.Dir(path))
	}
	return err
}

// envoyFormat matches a file with envoyproxy/ratelimit's top-level domain.
var envoyFormat = regexp.MustCompile(`(?m)^domain:`)
