package service

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenlimit/tokenlimit/alert"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/resilient"

	"github.com/tokenlimit/tokenlimit/service/stats"
)

// metrics are the service's Prometheus metrics. Labels name limits and
// results, never keys, so their cardinality is bounded by the configuration.
type metrics struct {
	decisions    *prometheus.CounterVec
	nearLimit    *prometheus.CounterVec
	latency      prometheus.Histogram
	storeErrors  *prometheus.CounterVec
	keyOverflow  *prometheus.CounterVec
	keySpaceFull *prometheus.CounterVec
	writeback    *prometheus.CounterVec
	// outcomeUnknown counts plain checks whose store call failed after it
	// may have been sent: each may or may not have charged.
	outcomeUnknown *prometheus.CounterVec
	reloads        *prometheus.CounterVec
	// costErrors counts cost expressions that failed or returned a
	// negative cost, each charged 0.
	costErrors *prometheus.CounterVec
	// alerts counts alert_at events by limit and threshold.
	alerts *prometheus.CounterVec
	// waitingNow and waits are the requests waiting under a limit's wait
	// now, and the waits by outcome (wait.go).
	waitingNow prometheus.Gauge
	waits      *prometheus.CounterVec
	stats      stats.Stats // live per-second counts for the dashboard
	// counters caches each limit's decision counters (limitCounters), so
	// that a decision does not hash its label values again.
	counters sync.Map // limit name -> *limitCounters
}

// limitCounters are one limit's children of the decisions counter (by
// result) and of the near-limit counter, each made when first counted so
// that only results that happened are exported.
type limitCounters struct {
	name      string
	results   [len(stats.Results)]atomic.Pointer[prometheus.Counter]
	nearLimit atomic.Pointer[prometheus.Counter]
}

// countersFor returns the counters of the limit named name. Limit names
// come from the configuration, so the cache is bounded like the metric's
// own label values.
func (m *metrics) countersFor(name string) *limitCounters {
	if c, ok := m.counters.Load(name); ok {
		return c.(*limitCounters)
	}
	c, _ := m.counters.LoadOrStore(name, &limitCounters{name: name})
	return c.(*limitCounters)
}

// child returns *p, making it with vec's child of labels first if needed.
func child(p *atomic.Pointer[prometheus.Counter], vec *prometheus.CounterVec, labels ...string) prometheus.Counter {
	if c := p.Load(); c != nil {
		return *c
	}
	c := vec.WithLabelValues(labels...)
	p.Store(&c)
	return c
}

// nearLimitShare: an allowed decision leaving less than this share of the
// limit counts as near the limit.
const nearLimitShare = 0.1

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_decisions_total",
			Help: "Decisions per limit; result is allowed, denied, shadow_allowed, shadow_denied, fail_open_allowed, fail_open_denied, fail_closed or key_space_full.",
		}, []string{"limit", "result"}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_near_limit_total",
			Help: "Allowed decisions that left less than 10% of the limit.",
		}, []string{"limit"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tokenlimit_decision_seconds",
			Help:    "Time to decide a check, store round trip included.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_store_errors_total",
			Help: "Failed calls to a store (timeouts, connection errors), by store: \"default\" for the main one, else its name under stores.",
		}, []string{"store"}),
		keyOverflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_key_overflow_total",
			Help: "Requests counted against a limit's overflow budget because the limit already had max_keys live keys (per replica).",
		}, []string{"limit"}),
		keySpaceFull: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_key_space_full_total",
			Help: "Requests denied because they needed a new key and the store (store=\"store\") or the local fail-open budget (store=\"local\") was full.",
		}, []string{"store"}),
		outcomeUnknown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_store_outcome_unknown_total",
			Help: "Checks whose store call timed out or failed once sent: each may or may not have been charged in the store (at most its cost), by store.",
		}, []string{"store"}),
		writeback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_fail_open_writeback_total",
			Help: "Cost admitted on a local fail-open budget, in the limit's units, by what became of it once the store answered: ok (charged to the store), failed (the charge failed: applied or not, unknown; kept and tried again), expired (the budget had refilled it meanwhile), evicted (forgotten to stay within the memory bound).",
		}, []string{"limit", "result"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_config_reloads_total",
			Help: "Configuration reloads by result (ok, error).",
		}, []string{"result"}),
		costErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_cost_expression_errors_total",
			Help: "Costs of a limit's cost expression charged 0 instead: reason is negative (it returned a negative cost) or error (it failed: its cost limit, an overflow, a missing descriptor).",
		}, []string{"limit", "reason"}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_alerts_total",
			Help: "Budget thresholds (alert_at) crossed, one per threshold, budget and window across replicas, by limit and threshold (\"80%\").",
		}, []string{"limit", "threshold"}),
		waitingNow: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tokenlimit_waiting",
			Help: "Requests waiting now under a limit's wait for their budget to refill, in this replica.",
		}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_waits_total",
			Help: "Denied requests that a limit's wait applied to, by outcome: admitted (after waiting), denied (still denied within the wait: answered 429), cancelled (the caller left while waiting; nothing charged) or full (max_waiting already waiting: answered 429 at once).",
		}, []string{"outcome"}),
	}
	// Both results exist from the start, at 0, so that a dashboard or an
	// alert on errors sees the series before the first reload.
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	for _, o := range []string{"admitted", "denied", "cancelled", "full"} {
		m.waits.WithLabelValues(o)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.decisions, m.nearLimit, m.latency, m.storeErrors, m.keyOverflow, m.keySpaceFull, m.writeback, m.outcomeUnknown, m.reloads, m.costErrors, m.alerts, m.waitingNow, m.waits} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// waited counts a wait that ended with outcome.
func (m *metrics) waited(outcome string) { m.waits.WithLabelValues(outcome).Inc() }

// costFailed counts a cost expression of limit that failed with err
// (config.ErrNegativeCost or another error).
func (m *metrics) costFailed(limit string, err error) {
	reason := "error"
	if errors.Is(err, config.ErrNegativeCost) {
		reason = "negative"
	}
	m.costErrors.WithLabelValues(limit, reason).Inc()
}

// keyCounter is a store that counts its live keys under a bound, as the
// embedded store does.
type keyCounter interface {
	Len() int
	MaxKeys() int
}

// watchKeys exports the live keys and the bound of each store as
// tokenlimit_store_keys and tokenlimit_store_max_keys, labelled by store
// ("store", "local"), read when scraped.
func watchKeys(reg prometheus.Registerer, stores map[string]keyCounter) error {
	if reg == nil {
		return nil
	}
	for name, kc := range stores {
		labels := prometheus.Labels{"store": name}
		for _, g := range []prometheus.Collector{
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tokenlimit_store_keys", ConstLabels: labels,
				Help: "Live keys of the embedded store (store) or of the local fail-open budgets (local), expired ones not yet swept included."},
				func() float64 { return float64(kc.Len()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tokenlimit_store_max_keys", ConstLabels: labels,
				Help: "The bound on those keys: a request that needs one more is denied (key_space_full)."},
				func() float64 { return float64(kc.MaxKeys()) }),
		} {
			if err := reg.Register(g); err != nil {
				return err
			}
		}
	}
	return nil
}

// watchStores exports each store's circuit breaker as
// tokenlimit_breaker_state and its fail-open reservations (and settlements
// of them) waiting for it as tokenlimit_reconcile_pending, labelled by
// store and read when scraped.
func watchStores(reg prometheus.Registerer, stores *resilient.Stores) error {
	if reg == nil {
		return nil
	}
	for _, l := range stores.Layers() {
		labels := prometheus.Labels{"store": l.Name}
		for _, c := range []prometheus.Collector{
			l.Layer.Guard().BreakerGauge(labels),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "tokenlimit_reconcile_pending",
				Help:        "Local fail-open reservations whose reservation or settlement waits for the store to answer again.",
				ConstLabels: labels,
			}, func() float64 { return float64(l.Layer.PendingReservations()) }),
		} {
			if err := reg.Register(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// watchLeases exports what each leased limit's leases hold in this
// replica and what became of them, read from the fault layer when scraped
// (resilient.Stores.LeaseStats, which the dashboard's listing reads too):
// the gauges tokenlimit_lease_outstanding (leases held) and
// tokenlimit_lease_unused (what they can still admit, in the limit's
// units), and the counters tokenlimit_lease_takes_total (by outcome) and
// tokenlimit_lease_returned_total (unused units, by result).
func watchLeases(reg prometheus.Registerer, stores *resilient.Stores) error {
	if reg == nil {
		return nil
	}
	return reg.Register(leaseCollector{stores})
}

var (
	leaseOutstandingDesc = prometheus.NewDesc("tokenlimit_lease_outstanding",
		"Leases this replica holds, by limit: each was charged to the store whole and decides calls in process until it ends.", []string{"limit"}, nil)
	leaseUnusedDesc = prometheus.NewDesc("tokenlimit_lease_unused",
		"What this replica's leases can still admit, by limit, in the limit's units: at most what leasing holds back from other replicas now.", []string{"limit"}, nil)
	leaseTakesDesc = prometheus.NewDesc("tokenlimit_lease_takes_total",
		"Leases asked of the store, by limit and outcome: taken (charged whole), denied (less than a lease left: calls are decided on the store until one could fit), failed (the store failed).", []string{"limit", "outcome"}, nil)
	leaseReturnedDesc = prometheus.NewDesc("tokenlimit_lease_returned_total",
		"Unused parts of ended leases, in the limit's units, by result: returned (refunded to the store) or stood (not returnable: the store failed until the lease's record expired, or the replica stopped while it failed).", []string{"limit", "result"}, nil)
)

// leaseCollector reads the fault layer's leases when scraped.
type leaseCollector struct{ stores *resilient.Stores }

func (c leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- leaseOutstandingDesc
	ch <- leaseUnusedDesc
	ch <- leaseTakesDesc
	ch <- leaseReturnedDesc
}

func (c leaseCollector) Collect(ch chan<- prometheus.Metric) {
	for name, s := range c.stores.LeaseStats() {
		ch <- prometheus.MustNewConstMetric(leaseOutstandingDesc, prometheus.GaugeValue, float64(s.Outstanding), name)
		ch <- prometheus.MustNewConstMetric(leaseUnusedDesc, prometheus.GaugeValue, float64(s.Unused), name)
		for _, t := range []struct {
			outcome string
			n       int64
		}{{"taken", s.Taken}, {"denied", s.Denied}, {"failed", s.Failed}} {
			ch <- prometheus.MustNewConstMetric(leaseTakesDesc, prometheus.CounterValue, float64(t.n), name, t.outcome)
		}
		ch <- prometheus.MustNewConstMetric(leaseReturnedDesc, prometheus.CounterValue, float64(s.Returned), name, "returned")
		ch <- prometheus.MustNewConstMetric(leaseReturnedDesc, prometheus.CounterValue, float64(s.Stood), name, "stood")
	}
}

// localKeys counts the keys of the fault layer's local budgets.
type localKeys struct{ f *resilient.Failover }

func (l localKeys) Len() int {
	n, _ := l.f.LocalKeys()
	return n
}

func (l localKeys) MaxKeys() int {
	_, n := l.f.LocalKeys()
	return n
}

// countAlert counts an alert event.
func (m *metrics) countAlert(e alert.Event) { m.alerts.WithLabelValues(e.Limit, e.Threshold).Inc() }

// faultObserver counts the store failures, lost outcomes and write-backs
// of the fault layer of the store named store.
func (m *metrics) faultObserver(store string) resilient.Observer {
	failed, unknown := m.storeErrors.WithLabelValues(store), m.outcomeUnknown.WithLabelValues(store)
	return resilient.Observer{
		StoreFailed:    func(string) { failed.Inc() },
		OutcomeUnknown: unknown.Inc,
		Writeback: func(limit, result string, cost int64) {
			m.writeback.WithLabelValues(limit, result).Add(float64(cost))
		},
	}
}

// observe counts a decision per limit, in the metrics and in the
// dashboard's stats.
func (m *metrics) observe(d Decision, took time.Duration) {
	if took > 0 {
		m.stats.Time(d.At, took)
		m.latency.Observe(took.Seconds())
	}
	for i := range d.Limits {
		o := &d.Limits[i]
		r := result(d, o)
		m.stats.Count(d.At, o.Name, r)
		c := m.countersFor(o.Name)
		child(&c.results[r], m.decisions, c.name, r.String()).Inc()
		if o.Allowed && float64(o.Remaining) < nearLimitShare*float64(o.Limit) {
			child(&c.nearLimit, m.nearLimit, c.name).Inc()
		}
	}
}

// result is o's result in d: the result label of tokenlimit_decisions_total
// and the stats count, alike.
func result(d Decision, o *Outcome) stats.Result {
	switch {
	case d.KeySpaceFull:
		return stats.KeySpaceFull
	case d.Unavailable && !o.FailOpen:
		return stats.FailClosed
	case o.Shadow:
		return pick(o.Allowed, stats.ShadowAllowed, stats.ShadowDenied)
	case o.FailOpen:
		return pick(o.Allowed, stats.FailOpenAllowed, stats.FailOpenDenied)
	}
	return pick(o.Allowed, stats.Allowed, stats.Denied)
}

// pick is allowed if ok, else denied.
func pick(ok bool, allowed, denied stats.Result) stats.Result {
	if ok {
		return allowed
	}
	return denied
}
