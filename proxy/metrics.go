package proxy

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus metrics: the tokens and the spend of
// settled calls by model, and the upstream's answers and latency by API.
// The model label is the entry of the configuration's prices table that
// priced the call, or "other": its values are bounded by the
// configuration, whatever models clients name. Create them once per
// registry with NewMetrics; they are safe for concurrent use.
type Metrics struct {
	tokens   *prometheus.CounterVec
	spend    *spendCounter
	statuses *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// corrected counts usages the proxy did not settle to as reported.
	corrected *prometheus.CounterVec
}

// OtherModel is the model label of calls whose model has no price.
const OtherModel = "other"

// NewMetrics registers the proxy's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_proxy_tokens_total",
			Help: "LLM tokens of settled calls, by model (a prices entry, or other), direction (input, output) and class: input is uncached, cached (read from the prompt cache) or cache_write; output is reasoning or text.",
		}, []string{"model", "direction", "class"}),
		spend: &spendCounter{micros: map[string]int64{}, desc: prometheus.NewDesc("tokenlimit_proxy_spend_usd_total",
			"US dollars settled calls cost by the prices table, by model (a prices entry, or other).", []string{"model"}, nil)},
		statuses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_proxy_upstream_responses_total",
			Help: "Upstream answers by API (chat, completions, embeddings, responses, messages, passthrough) and HTTP status; 502/504 when it gave none, 499 when the client left first.",
		}, []string{"api", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tokenlimit_proxy_upstream_seconds",
			Help:    "Time from forwarding a call to the upstream's response headers, by API.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"api"}),
		corrected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenlimit_proxy_usage_corrected_total",
			Help: "Usages upstreams reported that the proxy did not take as they were, by rule: ignored (a negative field, or more than 2^40 tokens: settled as if no usage was reported) or clamped (a part above its whole, such as cached tokens above the input: the part cut to its whole).",
		}, []string{"rule"}),
	}
	for _, rule := range []string{"ignored", "clamped"} {
		m.corrected.WithLabelValues(rule) // at 0 from the start, for alerts
	}
	for _, c := range []prometheus.Collector{m.tokens, m.spend, m.statuses, m.latency, m.corrected} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// upstream records an upstream answer of status after took.
func (m *Metrics) upstream(k Kind, status int, took time.Duration) {
	if m == nil {
		return
	}
	m.statuses.WithLabelValues(k.String(), strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(k.String()).Observe(took.Seconds())
}

// usageCorrected counts a usage corrected by rule (ignored, clamped).
func (m *Metrics) usageCorrected(rule string) {
	if m != nil {
		m.corrected.WithLabelValues(rule).Inc()
	}
}

// settled records a settled call's tokens and spend (micro-dollars) under
// model, a prices entry or OtherModel.
func (m *Metrics) settled(model string, s Settlement) {
	if m == nil || s.Kind == Passthrough {
		return
	}
	m.tokens.WithLabelValues(model, "input", "uncached").Add(float64(s.Input - s.Cached - s.CacheWrite))
	m.tokens.WithLabelValues(model, "input", "cached").Add(float64(s.Cached))
	m.tokens.WithLabelValues(model, "input", "cache_write").Add(float64(s.CacheWrite))
	m.tokens.WithLabelValues(model, "output", "reasoning").Add(float64(s.Reasoning))
	m.tokens.WithLabelValues(model, "output", "text").Add(float64(s.Output - s.Reasoning))
	m.spend.add(model, s.Spend)
}

// spendCounter counts micro-dollars by model in integers and exports them
// in US dollars: a whole number of micro-dollars over 1e6 is the float
// nearest its decimal (0.00084), where a float sum of each call's dollars
// drifts (0.0008399999999999999 after five calls of $0.000168). Exact up to
// 2^53 micro-dollars ($9 billion). Safe for concurrent use.
type spendCounter struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	micros map[string]int64 // by model label
}

func (c *spendCounter) add(model string, micros int64) {
	c.mu.Lock()
	c.micros[model] += micros
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *spendCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *spendCounter) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for model, micros := range c.micros {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(micros)/1e6, model)
	}
}
