// Package service turns the engine into a rate-limit service: a request's
// descriptors (user, api_key, model, route, ...) select the configured limits,
// their keys are built from the descriptors, and all of them are checked in
// one atomic multi-limit call. It also applies shadow limits, failure modes
// (fail-open with a local budget, fail-closed), reservations with idempotency
// ids, configuration reloads and metrics. Transports (HTTP, gRPC) sit on top.
package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/alert"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/breaker"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/resilient"
	"github.com/tokenlimit/tokenlimit/service/stats"
)

// Options configures a Service. Store is required; zero values of the rest
// take the defaults documented on each field.
type Options struct {
	// Store is where budgets live: a memstore or a redisstore. The store
	// describes itself (tokenlimit.Describe): only for a remote one do the
	// timeout, the circuit breaker and failure modes apply; a store that is
	// not a tokenlimit.Describer counts as remote.
	Store tokenlimit.Store
	// Stores are the named stores (config.Config.Stores), where the
	// budgets of the limits that name them live; each has its own
	// deadline, circuit breaker and local budgets, its own entry in
	// Health and its own store label in the metrics. Every store a limit
	// names must be here (New and Reload refuse a configuration naming
	// another). A request whose limits live in several stores is decided
	// store by store (see resilient.Stores).
	Stores map[string]NamedStore
	// Clock is the service's time; time.Now when nil.
	Clock func() time.Time
	// Timer is the service's timer, which the waits of limits with a wait
	// sleep on (wait.go): a channel that receives once d has passed on
	// Clock, and a function that stops it. time.NewTimer's when nil; a
	// fake clock's lets tests drive waits.
	Timer func(d time.Duration) (c <-chan time.Time, stop func() bool)
	// AfterFunc runs fn once d has passed on Clock, and returns a function
	// that stops it: the timers of limits' leases. time.AfterFunc when
	// nil; a fake clock's lets tests drive leases.
	AfterFunc func(d time.Duration, fn func()) (stop func() bool)
	// StoreTimeout bounds every call to a remote store. Default 50ms.
	// Negative durations and sizes, here and below, are refused by New.
	StoreTimeout time.Duration
	// BreakerThreshold consecutive store failures open the circuit breaker
	// for BreakerCooldown. Defaults 5 and 1s.
	BreakerThreshold int
	BreakerCooldown  time.Duration
	// Registerer receives the service's Prometheus metrics; nil for none.
	Registerer prometheus.Registerer
	// Logger receives structured logs; slog.Default() when nil.
	Logger *slog.Logger
	// MaxDescriptorLength caps each descriptor value, in bytes. Default 256.
	MaxDescriptorLength int
	// ReservationTTL is how long a reservation is recorded in the store:
	// until then it can be settled (and a retried reserve replays); after
	// it an unsettled estimate simply stands. Default 10 minutes.
	ReservationTTL time.Duration
	// LocalMaxKeys bounds the keys of the local fail-open budgets used
	// while a remote store fails; a request that needs one more is denied
	// (Decision.KeySpaceFull). Default 100,000.
	LocalMaxKeys int
	// MaxReservations bounds the settlements of local fail-open
	// reservations waiting for the store to answer again; past it Settle
	// fails with ErrTooManyReservations. Default 100,000.
	MaxReservations int
	// FailOpenKeys bounds the fail-open budgets whose last store answer
	// (and cost admitted locally since) is remembered, to start their local
	// budgets where the store left them; about 150 bytes plus the key each.
	// Default 100,000.
	FailOpenKeys int
	// FailOpenRecovery is how long a fail-open budget that was decided on
	// its local budget keeps to that local budget once the store answers
	// for it again: a request is admitted only if both the store and the
	// local budget admit it, so that a replica back first is not granted
	// what other replicas admitted locally and have not yet written back.
	// It ends earlier once the local budget would be whole again. It should
	// cover the time between the replicas reaching the store again: the
	// breaker cooldown plus, for a Redis Cluster, a client's topology
	// refresh after a failover. Default 10s.
	FailOpenRecovery time.Duration
	// Plane, if not nil, holds the teams and api keys managed at runtime:
	// a request whose api_key descriptor is a plane key's secret is checked
	// against the key's limits, its team's and its plan's (see planeLevels).
	Plane *plane.Plane
	// Tracer, if not nil, records a span for each decision (trace.go).
	Tracer Tracer
	// Alerts configures the delivery of alert_at events (alerts.go): the
	// webhook and its secret; the log line and tokenlimit_alerts_total are
	// always on. Its Logger and Counted are the service's.
	Alerts alert.Options
}

// NamedStore is a store a limit names (config.Limit.Store).
type NamedStore struct {
	Store tokenlimit.Store
	// Timeout bounds each call to it; 0 takes Options.StoreTimeout.
	Timeout time.Duration
}

// Service answers rate-limit questions. It is safe for concurrent use.
type Service struct {
	opts  Options
	store tokenlimit.StoreInfo
	// fault is every store with its timeout, breaker and failure modes,
	// the main store (opts.Store) first.
	fault   *resilient.Stores
	metrics *metrics
	log     *slog.Logger
	rules   atomic.Pointer[ruleset]
	// overLimit caches recent denials of the limits with local_cache.
	overLimit *overLimit
	alerts    *alert.Notifier
	// waiting holds the requests waiting under a limit's wait (wait.go).
	waiting waitQueues
}

// New returns a service enforcing cfg.
func New(cfg *config.Config, opts Options) (*Service, error) {
	if cfg == nil || opts.Store == nil {
		return nil, errors.New("service: New needs a configuration and a store")
	}
	if err := validate(opts); err != nil {
		return nil, err
	}
	opts = withDefaults(opts)
	s := &Service{opts: opts, store: tokenlimit.Describe(opts.Store), log: opts.Logger, overLimit: newOverLimit()}
	var err error
	if s.metrics, err = newMetrics(opts.Registerer); err != nil {
		return nil, fmt.Errorf("service: metrics: %w", err)
	}
	if s.fault, err = s.newStores(opts); err != nil {
		return nil, err
	}
	if err := s.checkStores(cfg); err != nil {
		return nil, err
	}
	stores := map[string]keyCounter{"local": localKeys{s.fault.Main()}}
	if kc, ok := opts.Store.(keyCounter); ok {
		stores["store"] = kc
	}
	if err := watchKeys(opts.Registerer, stores); err != nil {
		return nil, fmt.Errorf("service: metrics: %w", err)
	}
	if err := watchStores(opts.Registerer, s.fault); err != nil {
		return nil, fmt.Errorf("service: metrics: %w", err)
	}
	if err := watchLeases(opts.Registerer, s.fault); err != nil {
		return nil, fmt.Errorf("service: metrics: %w", err)
	}
	opts.Alerts.Logger, opts.Alerts.Counted = opts.Logger, s.metrics.countAlert
	s.alerts = alert.NewNotifier(opts.Alerts)
	s.rules.Store(compile(cfg, 1, nil))
	return s, nil
}

// newStores builds the fault layer of the main store and of each named
// one, in the order of their names.
func (s *Service) newStores(opts Options) (*resilient.Stores, error) {
	layer := func(name string, st tokenlimit.Store, timeout time.Duration) (resilient.NamedLayer, error) {
		f, err := resilient.NewFailover(st, resilient.FailoverOptions{
			Options: resilient.Options{Timeout: timeout, BreakerThreshold: opts.BreakerThreshold, BreakerCooldown: opts.BreakerCooldown,
				Clock: opts.Clock, OnBreaker: s.logBreaker(name, st), OnFull: s.logFull(name, st)},
			ReservationTTL: opts.ReservationTTL, LocalMaxKeys: opts.LocalMaxKeys, MaxReservations: opts.MaxReservations,
			FailOpenKeys: opts.FailOpenKeys, Recovery: opts.FailOpenRecovery, Logger: opts.Logger.With("store", name),
			Observer: s.metrics.faultObserver(name), AfterFunc: opts.AfterFunc,
		})
		if err != nil {
			return resilient.NamedLayer{}, fmt.Errorf("service: store %q: %w", name, err)
		}
		return resilient.NamedLayer{Name: name, Layer: f}, nil
	}
	main, err := layer(config.MainStore, opts.Store, opts.StoreTimeout)
	if err != nil {
		return nil, err
	}
	var named []resilient.NamedLayer
	for _, name := range slices.Sorted(maps.Keys(opts.Stores)) {
		ns := opts.Stores[name]
		if ns.Store == nil || ns.Timeout < 0 || name == config.MainStore {
			return nil, fmt.Errorf("service: New: Stores[%q] needs a store, a timeout not negative and a name other than %q", name, config.MainStore)
		}
		l, err := layer(name, ns.Store, cmp.Or(ns.Timeout, opts.StoreTimeout))
		if err != nil {
			return nil, err
		}
		named = append(named, l)
	}
	return resilient.NewStores(main, named...)
}

// checkStores refuses a configuration with a limit whose store the
// service does not have.
func (s *Service) checkStores(cfg *config.Config) error {
	for _, l := range cfg.Limits {
		if !s.fault.Has(l.Store) {
			return fmt.Errorf("service: limit %q names store %q, which this service was not started with (stores are opened at start: restart to add one)", l.Name, l.Store)
		}
	}
	return nil
}

// validate refuses negative options, naming the option.
func validate(o Options) error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"StoreTimeout", o.StoreTimeout}, {"BreakerCooldown", o.BreakerCooldown}, {"ReservationTTL", o.ReservationTTL}, {"FailOpenRecovery", o.FailOpenRecovery}} {
		if d.v < 0 {
			return fmt.Errorf("service: New: %s must not be negative, got %s", d.name, d.v)
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"BreakerThreshold", o.BreakerThreshold}, {"MaxDescriptorLength", o.MaxDescriptorLength}, {"MaxReservations", o.MaxReservations}, {"LocalMaxKeys", o.LocalMaxKeys}, {"FailOpenKeys", o.FailOpenKeys}} {
		if n.v < 0 {
			return fmt.Errorf("service: New: %s must not be negative, got %d", n.name, n.v)
		}
	}
	return nil
}

func withDefaults(o Options) Options {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Timer == nil {
		o.Timer = newTimer
	}
	if o.StoreTimeout == 0 {
		o.StoreTimeout = resilient.DefaultTimeout
	}
	if o.BreakerThreshold == 0 {
		o.BreakerThreshold = resilient.DefaultBreakerThreshold
	}
	if o.BreakerCooldown == 0 {
		o.BreakerCooldown = resilient.DefaultBreakerCooldown
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxDescriptorLength == 0 {
		o.MaxDescriptorLength = 256
	}
	if o.ReservationTTL == 0 {
		o.ReservationTTL = resilient.DefaultReservationTTL
	}
	// LocalMaxKeys, MaxReservations, FailOpenKeys and FailOpenRecovery
	// take resilient.FailoverOptions' defaults there.
	return o
}

// newTimer is time.NewTimer as an Options.Timer.
func newTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// logBreaker returns the logger of the circuit breaker of st, the store
// named name: opening (error) and closing again (info), once each. The
// half-open trials in between, one per cooldown while the store stays
// down, are logged at debug.
func (s *Service) logBreaker(name string, st tokenlimit.Store) func(from, to breaker.State, failures int) {
	attrs := []any{"store", name, "kind", tokenlimit.Describe(st).Name}
	return func(from, to breaker.State, failures int) {
		switch {
		case to == breaker.Open && from == breaker.Closed:
			s.log.Error("store circuit breaker opened: the store is failing; limits follow their failure modes",
				append(attrs, "failures", failures, "retry_every", s.opts.BreakerCooldown)...)
		case to == breaker.Closed:
			s.log.Info("store circuit breaker closed: the store answers again", attrs...)
		default:
			s.log.Debug("store circuit breaker "+to.String(), append(attrs, "from", from.String())...)
		}
	}
}

// logFull returns the logger of st, the store named name, filling up
// (error) and having room again (info), once each; the requests it refuses
// meanwhile are logged at debug and counted in
// tokenlimit_key_space_full_total.
func (s *Service) logFull(name string, st tokenlimit.Store) func(full bool) {
	attrs := []any{"store", name, "kind", tokenlimit.Describe(st).Name}
	return func(full bool) {
		if full {
			s.log.Error("the store is full: requests needing a new key are denied (key_space_full) until keys expire; see --max-keys", attrs...)
			return
		}
		s.log.Info("the store has room for new keys again", attrs...)
	}
}

// Close returns every lease this replica holds (their unused parts are
// refunded to the store; leased limits are decided on the store from then
// on) and stops delivering alert events (those still queued for the
// webhook are dropped, their ids logged). Decisions still work.
func (s *Service) Close() {
	if err := s.fault.Close(context.Background()); err != nil {
		s.log.Error("returning leases at close", "error", err)
	}
	s.alerts.Close()
}

// Reload replaces the limits with cfg's; checks in flight finish with the
// old ones. It records the reload in the metrics. A configuration with a
// limit naming a store the service was not started with is refused (and
// recorded as ReloadFailed does): the running limits stay.
func (s *Service) Reload(cfg *config.Config) error {
	if err := s.checkStores(cfg); err != nil {
		s.ReloadFailed(cfg.Source, err)
		return err
	}
	old := s.rules.Load()
	s.rules.Store(compile(cfg, old.version+1, old))
	// Leases were taken on the old limits: the next calls take new ones.
	if err := s.fault.ReturnLeases(context.Background()); err != nil {
		s.log.Error("returning leases at reload", "error", err)
	}
	s.metrics.reloads.WithLabelValues("ok").Inc()
	s.metrics.stats.RecordReload(s.opts.Clock(), old.version+1, nil)
	s.log.Info("configuration reloaded", "source", cfg.Source, "version", old.version+1, "limits", len(cfg.Limits))
	return nil
}

// ReloadFailed records a configuration that was rejected; the old limits
// keep running.
func (s *Service) ReloadFailed(source string, err error) {
	s.metrics.reloads.WithLabelValues("error").Inc()
	s.metrics.stats.RecordReload(s.opts.Clock(), s.ConfigVersion(), err)
	s.log.Error("configuration rejected, keeping the running limits", "source", source, "error", err)
}

// Stats returns the live per-second counts of decisions, for the dashboard.
func (s *Service) Stats() *stats.Stats { return &s.metrics.stats }

// ConfigVersion returns the version of the limits in force: 1 at start, one
// more per reload.
func (s *Service) ConfigVersion() int64 { return s.rules.Load().version }

// Health describes the store for health endpoints. The transports give it
// their own wire format.
type Health struct {
	// Store names the store, such as "memory" or "redis".
	Store string
	// Breaker is the store's circuit breaker: "closed", "half-open" or
	// "open".
	Breaker string
	// Degraded is true while the store is failing (breaker not closed), and
	// while a remote store has not answered once since the service started.
	Degraded bool
	// Keys and MaxKeys are the live keys of a store that counts them (the
	// embedded store; expired keys not yet swept included) and its bound;
	// both 0 for Redis.
	Keys    int
	MaxKeys int
	// LocalKeys and LocalMaxKeys are the same for the local fail-open
	// budgets (no keys while the store is healthy).
	LocalKeys    int
	LocalMaxKeys int
	// KeySpaceFull is true while the store, or the local fail-open budget,
	// holds as many keys as it may: requests that need a new key are
	// denied (Decision.KeySpaceFull); keys already stored keep working.
	KeySpaceFull bool
	// Error is the last store error while Degraded, such as "redis
	// 127.0.0.1:6379: not connected yet: ... connection refused"; empty
	// otherwise.
	Error string
	// Stores are the named stores' health, by name in order. A named
	// store that fails does not make the service Degraded: its limits
	// follow their failure modes (a far home region cut off should not
	// take a whole region's replicas out of service).
	Stores []StoreHealth
}

// StoreHealth is a named store's health.
type StoreHealth struct {
	Name string
	// Breaker, Degraded and Error are as Health's, for this store.
	Breaker  string
	Degraded bool
	Error    string
}

// Health returns the store's health. While the breaker is not closed and its
// cooldown has passed, or while a remote store has not answered yet, it
// probes the store itself (one peek), so that a replica with no traffic
// still notices that Redis came back, or that it never answered.
func (s *Service) Health() Health {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.StoreTimeout)
	defer cancel()
	all := s.fault.Health(ctx)
	gh := all[0].Health
	h := Health{Store: s.store.Name, Breaker: gh.Breaker, Degraded: gh.Degraded, Error: gh.Error}
	for _, n := range all[1:] {
		h.Stores = append(h.Stores, StoreHealth{Name: n.Name, Breaker: n.Breaker, Degraded: n.Degraded, Error: n.Error})
	}
	h.LocalKeys, h.LocalMaxKeys = s.fault.Main().LocalKeys()
	if kc, ok := s.opts.Store.(keyCounter); ok {
		h.Keys, h.MaxKeys = kc.Len(), kc.MaxKeys()
	}
	h.KeySpaceFull = (h.MaxKeys > 0 && h.Keys >= h.MaxKeys) || h.LocalKeys >= h.LocalMaxKeys
	return h
}

// Request is one set of descriptors to check, with the request's own cost.
type Request struct {
	// Descriptors name the request: user, api_key, model, ip, route,
	// tenant, plan, or any custom name. Values are at most
	// Options.MaxDescriptorLength bytes.
	Descriptors map[string]string
	// Cost is the request's own cost (such as LLM tokens), used by limits
	// whose cost is "request". Zero means 1.
	Cost int64
	// Spend is the request's price in micro-dollars (1 USD = 1,000,000),
	// charged by limits with unit: usd; zero charges them nothing. Callers
	// price requests themselves (see PriceOf), as the LLM proxy does.
	Spend int64
	// Usage is the request's tokens by class (an LLM call's estimate),
	// which limits whose cost is a token class or an expression charge;
	// nil counts Cost as uncached input tokens. See SettleUsage.
	Usage *config.Usage
	// Wait, if above 0 (at most config.MaxWait), is how long the caller
	// will wait rather than be denied: it replaces the wait of every limit
	// that denies it, one without wait: included (whose max_waiting is then
	// config.DefaultMaxWaiting). See waitAndDecide.
	Wait time.Duration
	// Limit, when not nil, is a limit the request names itself (an Envoy
	// RLS descriptor's limit override). Only limits configured with
	// rls_limit_override apply it; the others ignore it.
	Limit *RequestLimit
	// key, when set (KeyUsage), is the plane key the request is made
	// with, already resolved: Descriptors are the key's, and these are its
	// levels' limits.
	key *levels
}

// RequestLimit is a limit a request names: Quota per Period. A limit that
// allows it (config.Limit.RLSOverride) keeps its algorithm and takes
// Quota and Period instead of its own (a bucket's capacity becomes Quota),
// with a budget of its own per Period, apart from the configured one's.
type RequestLimit struct {
	// Quota is 1 to tokenlimit.MaxQuota.
	Quota int64
	// Period is a whole number of seconds up to tokenlimit.MaxPeriod.
	Period time.Duration
}

// apply is l with r's quota and period: its windows aligned to the epoch,
// a bucket's capacity the quota.
func (r *RequestLimit) apply(l tokenlimit.Limit) tokenlimit.Limit {
	l.Quota, l.Period, l.Burst, l.Offset = r.Quota, r.Period, 0, 0
	return l
}

// keySuffix sets apart the budget of a request's limit from the configured
// limit's, and those of different periods from one another; requests of
// one period share a budget whatever their quota, as in Envoy's reference
// service.
func (r *RequestLimit) keySuffix() string {
	return "|per=" + strconv.FormatInt(int64(r.Period/time.Second), 10) + "s"
}

// Outcome is one limit's answer within a Decision.
type Outcome struct {
	// Name is the limit's name; Key the budget's key.
	Name string
	Key  string
	// Request is the index of the Request that selected the limit.
	Request int
	// Cost is what the request cost under this limit.
	Cost int64
	// Level is where the limit comes from: LevelPlan for a limit of the
	// configuration, LevelTeam or LevelKey for one of the plane key's team
	// or of the key (see the package plane). LevelName names it: the
	// request's plan ("" for none), the team's id, or the key's name.
	Level     Level
	LevelName string
	// Unit is what the limit counts.
	Unit Unit
	// Shadow limits never deny; Allowed says whether they would have.
	Shadow bool
	// FailOpen marks an answer taken from the local budget because the
	// store was failing, or, during the recovery period after that
	// (Options.FailOpenRecovery), a denial by the local budget.
	FailOpen bool
	// Entries, set by Inspect for a sliding log, are the charges in its
	// window, oldest first.
	Entries []tokenlimit.LogEntry
	tokenlimit.Result
}

// Decision is the service's answer.
type Decision struct {
	// Allowed is false if an enforced limit denied (or could not decide and
	// fails closed).
	Allowed bool
	// Unavailable is true when a fail-closed limit could not be decided
	// because the store is failing: answer 503, not 429.
	Unavailable bool
	// KeySpaceFull is true when the request needed a new key and the store
	// (or, while it fails, the local fail-open budget) already holds as
	// many as it may: the request is denied, whatever the failure modes,
	// and nothing is charged. Allowed is false.
	KeySpaceFull bool
	// Limits lists every limit that applied, enforced and shadow.
	Limits []Outcome
	// At is when the store decided.
	At time.Time
	// ReservationID is set by Reserve.
	ReservationID string
	// Reserved reports that a reservation is recorded under ReservationID
	// and awaits Settle: admitted, with at least one limit charged.
	Reserved bool
	// Replayed reports that the reservation was made by an earlier reserve
	// of the same id and request: this decision is that one's, and nothing
	// more was charged.
	Replayed bool
	// Waited is how long the request waited under the waits of the limits
	// that first denied it before this decision (wait.go); 0 if it did not.
	Waited time.Duration
	// Alerts are the alert_at thresholds this request's charges crossed,
	// for a warning header (alerts.go).
	Alerts []Alert
	// measured are the costs of the reservation's limits counted in token
	// classes, measure k's at k (see SettleUsage).
	measured []measure
	// held is the reservation's handle when it was reserved to be settled
	// in this process (ReserveOptions.InProcess); nil otherwise.
	held *resilient.Held
}

// Tightest returns the enforced outcome that constrains the request most (see
// tokenlimit.Decision.Tightest), for rate-limit headers; false if none.
func (d Decision) Tightest() (Outcome, bool) {
	best := -1
	for i := range d.Limits {
		if !d.Limits[i].Shadow && (best < 0 || Tighter(d.Limits[i].Result, d.Limits[best].Result)) {
			best = i
		}
	}
	if best < 0 {
		return Outcome{}, false
	}
	return d.Limits[best], true
}

// Tighter reports whether result a constrains a request more than b, as
// tokenlimit.Decision.Tightest ranks results: of a list, Tightest picks
// the first result that no later one is Tighter than.
func Tighter(a, b tokenlimit.Result) bool {
	pair := [2]tokenlimit.Result{b, a}
	return tokenlimit.Decision{Results: pair[:]}.Tightest() == 1
}

// Check decides requests against the limits they select, all or nothing:
// the enforced limits of all requests are charged only if every one admits.
// Shadow limits are checked after, and never deny.
func (s *Service) Check(ctx context.Context, reqs ...Request) (Decision, error) {
	ctx, span := s.startDecision(ctx, OpCheck)
	d, err := s.check(ctx, reqs)
	endDecision(span, &d, err)
	return d, err
}

func (s *Service) check(ctx context.Context, reqs []Request) (Decision, error) {
	start := time.Now()
	var buf planBuffer
	plan, err := s.plan(reqs, buf[:0])
	if err != nil {
		return Decision{}, err
	}
	d, err := s.decide(ctx, plan)
	took := time.Since(start) // the first decision's, without a wait
	if err == nil && !d.Allowed {
		d, err = s.waitAndDecide(ctx, nil, requestWait(reqs), plan.enforced, d, func() (Decision, error) { return s.decide(ctx, plan) })
	}
	if err != nil {
		return Decision{}, err
	}
	s.metrics.observe(d, took)
	return d, nil
}

// ErrUnauthorized marks a request whose api key has the form of a plane
// key's secret but is unknown, revoked, disabled or expired (the key or its
// team). Test with errors.Is; the message says which, never the secret.
var ErrUnauthorized = errors.New("unauthorized")

// ErrInvalidRequest marks a request the service refuses: a descriptor too
// long, a negative cost. Test with errors.Is; the message names the field.
var ErrInvalidRequest = errors.New("invalid request")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}
