// Package proxy is an OpenAI-compatible reverse proxy that enforces
// tokenlimit's limits on LLM calls, counted in the tokens they really
// consume:
//
//  1. Before forwarding, it counts the prompt with an offline BPE tokenizer,
//     adds the most the reply may use (max_tokens, or a default), and
//     reserves that estimate on every limit the request selects, all or
//     nothing, taking a slot of its concurrency limits too.
//  2. A denied request gets 429 with an OpenAI-style body, Retry-After and
//     OpenAI's x-ratelimit-* headers; the upstream never sees it.
//  3. An admitted request is forwarded (streams pass through unbuffered)
//     and its reservation is settled to the usage the upstream reports:
//     before the response headers go out for a plain response, at the end
//     for a stream. A failed upstream call is refunded; a stream cut short
//     is charged the prompt and the tokens forwarded so far.
//  4. A stream whose output passes its estimate grows its reservation in
//     chunks on the budgets that stop streams, and is ended cleanly, in its
//     API's shape, when they cannot pay for more (stop.go).
//
// Paths other than the four LLM APIs (chat completions, completions,
// embeddings, responses) pass through under request-count and concurrency
// limits only.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/tokenizer"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/internal/peer"
	"github.com/tokenlimit/tokenlimit/service"
)

// UnknownKeys says what the proxy does with an api key the configuration
// does not list under api_keys (or with no key at all).
type UnknownKeys uint8

const (
	// RejectUnknownKeys answers 401 invalid_api_key.
	RejectUnknownKeys UnknownKeys = iota
	// DefaultPlanForUnknownKeys admits the request under the
	// configuration's default_plan. Every unknown key, and a request with
	// no key, is described to the limits as the one api_key UnknownKey:
	// all of them share one set of budgets, so that a client cannot get a
	// fresh budget by presenting a new key (nor fill the store with keys).
	// Limits keyed by ip as well ([api_key, ip]) split that budget per
	// client address.
	DefaultPlanForUnknownKeys
)

// UnknownKey is the api_key descriptor of every request whose key is
// missing from api_keys, or that carries none, under
// DefaultPlanForUnknownKeys. A configuration that lists "unknown" under
// api_keys makes the proxy reject unknown keys instead of sharing that
// key's budgets with them.
const UnknownKey = "unknown"

// Defaults of Options.
const (
	DefaultMaxTokens        = 4096
	DefaultMaxBodyBytes     = 4 << 20
	DefaultMaxResponseBytes = 16 << 20
	DefaultSettleTimeout    = 5 * time.Second
	DefaultMaxRetryWait     = time.Minute
)

// DefaultAuthFailures is the default of Options.AuthFailures: 10 failed
// authentications per client address, then one every 6 seconds.
var DefaultAuthFailures = tokenlimit.TokenBucketLimit(10, 10, time.Minute)

// Options configures a Proxy. Upstream is required; the zero value of every
// other field takes the default its comment names.
type Options struct {
	// Upstream is the OpenAI-compatible API to forward to, such as
	// https://api.openai.com. A request's path is appended to Upstream's
	// path, so clients of a proxy in front of https://api.openai.com use
	// base URL http://proxy/v1.
	Upstream *url.URL
	// AnthropicUpstream, when set, is where requests in Anthropic's
	// dialect go: the Messages API, and any request with an
	// anthropic-version header (such as /v1/messages/count_tokens). Nil:
	// Upstream. Anthropic's clients append /v1/messages to their base URL,
	// so they use base URL http://proxy.
	AnthropicUpstream *url.URL
	// Transport makes the upstream calls. Default: a clone of
	// http.DefaultTransport whose ResponseHeaderTimeout is 10 minutes.
	Transport http.RoundTripper
	// UpstreamAPIKey, when set, replaces the client's key: the client's
	// Authorization and x-api-key are dropped, and the request goes out
	// with Authorization "Bearer UpstreamAPIKey", or, in Anthropic's
	// dialect, x-api-key UpstreamAPIKey. Clients then hold keys of the
	// proxy's own (api_keys, or the quota plane's), and only the proxy
	// holds the upstream's key. A plane key's secret is never forwarded,
	// with or without UpstreamAPIKey.
	UpstreamAPIKey string
	// UnknownKeys says what to do with keys missing from api_keys.
	UnknownKeys UnknownKeys
	// TrustedProxies are the peers whose X-Forwarded-For is believed when
	// finding the client's ip. Empty: the connection's address is the ip.
	TrustedProxies []netip.Prefix
	// AuthFailures is each client's budget of failed authentications
	// (requests answered 401), kept in the service's store as limit
	// AuthFailuresLimit keyed by the client: its ip, or an IPv6 address's
	// /64. Once the store denies one, the replica answers 429 to every
	// request from that client, whatever its key, until the budget admits
	// one again. Zero: DefaultAuthFailures.
	AuthFailures tokenlimit.Limit
	// DefaultMaxTokens is the reply budget reserved for a request that sets
	// no max_tokens (max_completion_tokens, max_output_tokens); it is capped
	// so that prompt plus reply fit the smallest token limit the request
	// selects. Default 4096; at most MaxReplyTokens.
	DefaultMaxTokens int64
	// MaxBodyBytes bounds a request body the proxy reads to count it
	// (413 above). Default 4 MiB: counting costs up to about 1 ms per 10 KB
	// before any limit is checked.
	MaxBodyBytes int64
	// MaxResponseBytes bounds a non-streamed response the proxy buffers
	// to find its usage. Past it the proxy stops buffering: what it read
	// and the rest stream through to the client, and the call settles at
	// the reserved estimate (Basis AtEstimate). Default 16 MiB.
	MaxResponseBytes int64
	// MaxRetryWait is the longest wait a 429 asks clients to retry after.
	// A denial whose wait is longer (a daily budget used up, an hourly
	// window) tells them not to retry: x-should-retry: false, no
	// retry-after-ms, and the provider's quota-exhausted error, so that an
	// SDK raises at once instead of sleeping for hours. Default 60s.
	MaxRetryWait time.Duration
	// SettleTimeout bounds settling a reservation once the call is over.
	// Default 5s.
	SettleTimeout time.Duration
	// Tokenizer counts tokens; tokenizer.New() when nil.
	Tokenizer *tokenizer.Tokenizer
	// Logger receives the proxy's logs; slog.Default() when nil. Api keys
	// are logged redacted.
	Logger *slog.Logger
	// Metrics, if set, counts tokens and spend by model and the upstream's
	// answers and latency (see NewMetrics).
	Metrics *Metrics
	// OnSettle, if set, is called after each admitted request's
	// reservation is settled, for metrics and tests. It must not block.
	OnSettle func(Settlement)
}

// Basis says how a settlement's actual cost was found.
type Basis string

// The bases of a settlement.
const (
	// ByUsage: the usage the upstream reported.
	ByUsage Basis = "usage"
	// ByCount: no usage was reported (the stream was cut, the client left,
	// or the upstream does not report it): the counted prompt plus the
	// tokens of the content forwarded to the client.
	ByCount Basis = "counted"
	// Refunded: the upstream failed (an error status, a timeout, a refused
	// connection): no tokens are charged.
	Refunded Basis = "refunded"
	// AtEstimate: the response was too large to read for its usage; the
	// estimate stands.
	AtEstimate Basis = "estimate"
	// Released: a passthrough request ended; its slots were released and
	// its request counts stand.
	Released Basis = "released"
)

// Settlement reports how one admitted request was settled.
type Settlement struct {
	// RequestID is the proxy's id of the request (header
	// X-Tokenlimit-Request-Id).
	RequestID string
	// Kind and Model describe the call.
	Kind  Kind
	Model string
	// Reserved is the estimate that was reserved, in tokens; Actual the
	// tokens it was settled to.
	Reserved, Actual int64
	// Input and Output split Actual: input tokens (cached ones included)
	// and output tokens.
	Input, Output int64
	// Cached and CacheWrite are the parts of Input read from and written
	// to the provider's prompt cache; Reasoning the part of Output spent
	// reasoning.
	Cached, CacheWrite, Reasoning int64
	// ReservedSpend and Spend are the prices of Reserved and Actual in
	// micro-dollars; zero for a model without a price.
	ReservedSpend, Spend int64
	// Grown and GrownSpend are what a stream reserved beyond its estimate,
	// in tokens and micro-dollars, as its output passed it; refunded when
	// the call settled.
	Grown, GrownSpend int64
	// Basis says how Actual was found.
	Basis Basis
	// Stopped reports a stream ended at its budget: the budgets that stop
	// streams could not pay for more of it (settled ByCount).
	Stopped bool
	// Err is the store's error if the settlement failed (the estimate then
	// stands, and concurrency slots come back when their leases end).
	Err error
}

// Proxy is an http.Handler forwarding to an OpenAI-compatible upstream under
// a service's limits. It is safe for concurrent use.
type Proxy struct {
	svc      *service.Service
	opts     Options
	tok      counter
	log      *slog.Logger
	rp       *httputil.ReverseProxy
	failures *httpx.AuthFailures // opts.AuthFailures, as the service checks it
}

// New returns a proxy enforcing svc's limits in front of opts.Upstream.
func New(svc *service.Service, opts Options) (*Proxy, error) {
	if svc == nil {
		return nil, errors.New("proxy: New needs a service")
	}
	if opts.Upstream == nil || (opts.Upstream.Scheme != "http" && opts.Upstream.Scheme != "https") || opts.Upstream.Host == "" {
		return nil, fmt.Errorf("proxy: the upstream must be an http or https URL, got %v", opts.Upstream)
	}
	if u := opts.AnthropicUpstream; u != nil && ((u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return nil, fmt.Errorf("proxy: the Anthropic upstream must be an http or https URL, got %v", u)
	}
	if opts.UnknownKeys > DefaultPlanForUnknownKeys {
		return nil, fmt.Errorf("proxy: unknown UnknownKeys policy %d", opts.UnknownKeys)
	}
	opts = withDefaults(opts)
	if err := opts.AuthFailures.Validate(); err != nil {
		return nil, fmt.Errorf("proxy: AuthFailures: %w", err)
	}
	p := &Proxy{svc: svc, opts: opts, tok: counter{opts.Tokenizer}, log: opts.Logger, failures: httpx.NewAuthFailures(svc, opts.AuthFailures)}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamFailed,
		Transport:      opts.Transport,
		ErrorLog:       slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
		BufferPool:     &bufferPool{},
	}
	return p, nil
}

// bufferPool recycles the reverse proxy's 32 KiB copy buffers, which it
// would otherwise allocate for every response.
type bufferPool struct{ pool sync.Pool }

func (b *bufferPool) Get() []byte {
	if buf, ok := b.pool.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.pool.Put(&buf) }

func withDefaults(o Options) Options {
	if o.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = 10 * time.Minute
		o.Transport = t
	}
	if o.DefaultMaxTokens <= 0 {
		o.DefaultMaxTokens = DefaultMaxTokens
	}
	o.DefaultMaxTokens = min(o.DefaultMaxTokens, MaxReplyTokens)
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.MaxRetryWait <= 0 {
		o.MaxRetryWait = DefaultMaxRetryWait
	}
	if o.SettleTimeout <= 0 {
		o.SettleTimeout = DefaultSettleTimeout
	}
	if o.Tokenizer == nil {
		o.Tokenizer = tokenizer.New()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.AuthFailures == (tokenlimit.Limit{}) {
		o.AuthFailures = DefaultAuthFailures
	}
	return o
}

// call is one request's state, from reservation to settlement.
type call struct {
	id       string
	keyID    string // the plane key the call is made with; "" for another
	kind     Kind
	est      Estimate
	req      service.Request
	decision service.Decision // Reserved when there is a reservation to settle
	dialect  dialect
	body     []byte    // the body to forward; nil for a passthrough
	injected bool      // stream_options.include_usage was added for the proxy
	sent     time.Time // when the call was forwarded
	status   int       // the upstream's status (502, 504 or 499 without one)
	growth   growth    // what its stream reserved beyond the estimate (stop.go)
	once     sync.Once
}

type callKey struct{}

func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// ServeHTTP identifies the caller, estimates and reserves the request's
// cost, and forwards it if every limit admits it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &call{id: httpx.NewID(), kind: KindOf(r.Method, r.URL.Path), dialect: dialectOf(r)}
	w.Header().Set("X-Tokenlimit-Request-Id", c.id)
	if !p.identify(w, r, c) {
		return
	}
	if c.kind != Passthrough && !p.readCall(w, r, c) {
		return
	}
	if c.est.Model != "" {
		c.req.Descriptors["model"] = c.est.Model
	}
	if !p.reserve(w, r, c) {
		return
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callKey{}, c)))
}

// readCall reads and estimates an LLM call's body, or answers 400/413 and
// returns false.
func (p *Proxy) readCall(w http.ResponseWriter, r *http.Request, c *call) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.opts.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, c.dialect, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
			fmt.Sprintf("The request body is larger than this proxy accepts (%d bytes).", p.opts.MaxBodyBytes))
		return false
	case err != nil:
		writeError(w, c.dialect, http.StatusBadRequest, "invalid_request_error", "", "The request body could not be read: "+err.Error())
		return false
	}
	c.est, err = p.tok.estimate(c.kind, body, p.opts.DefaultMaxTokens)
	var bad *errBadBody
	switch {
	case errors.As(err, &bad) && bad.param != "":
		writeParamError(w, c.dialect, http.StatusBadRequest, "invalid_request_error", "integer_above_max_value", bad.param, bad.reason)
		return false
	case errors.As(err, &bad):
		writeError(w, c.dialect, http.StatusBadRequest, "invalid_request_error", "", "We could not parse the JSON body of your request: "+bad.reason)
		return false
	case err != nil:
		p.log.Error("tokenizer failed", "error", err)
		writeError(w, c.dialect, http.StatusInternalServerError, "server_error", "tokenizer_failed", "The proxy could not count the request's tokens.")
		return false
	}
	c.body = body
	if c.est.Stream && !c.est.IncludeUsage && (c.kind == Chat || c.kind == Completions) {
		if c.body, err = withIncludeUsage(body); err != nil {
			writeError(w, c.dialect, http.StatusBadRequest, "invalid_request_error", "", "We could not parse the JSON body of your request: "+err.Error())
			return false
		}
		c.injected = true
	}
	return true
}

// reserve caps a default reply budget, reserves the estimate, and answers
// 400, 429 or 503 when the request may not go on.
func (p *Proxy) reserve(w http.ResponseWriter, r *http.Request, c *call) bool {
	// A limit's wait ends when the client leaves (nothing charged). The
	// call is settled here, through its decision: leased limits are paid
	// from this replica's leases.
	opts := service.ReserveOptions{ID: c.id, Cancel: r.Context().Done(), InProcess: true}
	if c.kind == Passthrough {
		opts.Units = []service.Unit{service.Requests, service.InFlight}
	} else {
		if !c.est.CompletionSet && c.est.Completion > 0 {
			c.est.Completion = p.capCompletion(c)
		}
		c.req.Cost = max(c.est.Total(), 1)
		c.req.Usage = &config.Usage{Input: c.est.Prompt, Output: c.est.Completion}
		if !p.priceEstimate(w, c) {
			return false
		}
	}
	// A client that leaves mid-decision must not count as a store failure.
	d, err := p.svc.ReserveWith(context.WithoutCancel(r.Context()), opts, c.req)
	switch {
	case errors.Is(err, service.ErrInvalidRequest):
		writeError(w, c.dialect, http.StatusBadRequest, "invalid_request_error", "", err.Error())
		return false
	case err != nil && r.Context().Err() != nil:
		p.log.Debug("client left while its request waited under a limit's wait", "request_id", c.id)
		return false
	case err != nil:
		p.log.Error("reserve failed", "error", err, "request_id", c.id)
		writeError(w, c.dialect, http.StatusInternalServerError, "server_error", "", "The proxy could not decide the request.")
		return false
	case d.Unavailable:
		p.log.Debug("rate limiting unavailable", "request_id", c.id, "key", c.who())
		w.Header().Set("Retry-After", "1")
		writeError(w, c.dialect, http.StatusServiceUnavailable, "server_error", "rate_limiter_unavailable",
			"Rate limiting is unavailable right now (a limit that fails closed could not be decided). Please retry.")
		return false
	case !d.Allowed:
		p.deny(w, c, d)
		return false
	}
	c.decision = d
	return true
}

// capCompletion returns the default reply budget, capped so that prompt and
// reply fit the smallest token budget the request selects, and the reply
// the smallest output-token budget.
func (p *Proxy) capCompletion(c *call) int64 {
	req := c.req // a plane key's levels too
	req.Cost = 1
	sel, err := p.svc.Select(req)
	if err != nil {
		return c.est.Completion // Reserve reports the error
	}
	completion := c.est.Completion
	for _, s := range sel {
		switch {
		case s.Shadow:
		case s.Unit == service.Tokens:
			completion = min(completion, max(0, s.Limit.Capacity()-c.est.Prompt))
		case s.Unit == service.OutputTokens:
			completion = min(completion, s.Limit.Capacity())
		}
	}
	return completion
}

// clientIP returns the client's address (see peer.ClientIP), or the
// connection's as written when it cannot be parsed.
func (p *Proxy) clientIP(r *http.Request) string {
	if ip := peer.ClientIP(r, p.opts.TrustedProxies); ip.IsValid() {
		return ip.String()
	}
	return r.RemoteAddr
}

// rewrite points the outbound request at the upstream, with the body the
// proxy read (and perhaps rewrote).
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	c := callOf(pr.In.Context())
	d := dialectOf(pr.In)
	if d == anthropic && p.opts.AnthropicUpstream != nil {
		pr.SetURL(p.opts.AnthropicUpstream)
	} else {
		pr.SetURL(p.opts.Upstream)
	}
	if c != nil {
		c.sent = time.Now()
	}
	p.credentials(pr.Out.Header, c, d)
	if c == nil || c.body == nil {
		return
	}
	pr.Out.Body = io.NopCloser(bytes.NewReader(c.body))
	pr.Out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(c.body)), nil }
	pr.Out.ContentLength = int64(len(c.body))
	// Let the transport negotiate compression and undo it, so that the
	// proxy reads the usage of plain text.
	pr.Out.Header.Del("Accept-Encoding")
}

// settle settles c once to what it consumed, found by basis: its tokens,
// and their price on limits in usd; and reports it.
func (p *Proxy) settle(c *call, used bill, basis Basis) {
	c.once.Do(func() {
		actual := used.tokens()
		spend, _ := p.price(c, used)
		var err error
		var charged service.Charges
		if c.decision.Reserved {
			ctx, cancel := context.WithTimeout(context.Background(), p.opts.SettleTimeout)
			defer cancel()
			_, charged, err = p.svc.SettleUsage(ctx, c.decision, actual, &spend, used.usage())
			if err == nil {
				err = p.refundGrowth(ctx, c)
			}
		}
		if err != nil {
			p.log.Error("settle failed; the estimate stands", "request_id", c.id, "error", err)
		}
		s := Settlement{RequestID: c.id, Kind: c.kind, Model: c.est.Model, Actual: actual,
			Input: min(used.Input, actual), Output: used.Output, Cached: used.Cached, CacheWrite: used.CacheWrite, Reasoning: used.Reasoning,
			Spend: spend, Basis: basis, Stopped: c.growth.stopped, Err: err}
		if c.kind != Passthrough {
			s.Reserved, s.ReservedSpend = c.est.Total(), c.req.Spend
			s.Grown, s.GrownSpend = c.growth.tokens, c.growth.spend
		}
		entry, _, priced := p.svc.PriceOf(c.est.Model)
		if !priced {
			entry = OtherModel
		}
		p.opts.Metrics.settled(entry, s)
		p.accessLog(c, s, charged)
		if p.opts.OnSettle != nil {
			p.opts.OnSettle(s)
		}
	})
}

// accessLog writes the one line of an admitted call, once it is settled:
// its request id, what it is, the upstream's status, its estimate, what it
// was settled to and how (charged: what each limit counting token classes
// was settled to, by name; null when there is none), and the limits it
// touched.
func (p *Proxy) accessLog(c *call, s Settlement, charged service.Charges) {
	limits := make([]string, 0, len(c.decision.Limits))
	for _, o := range c.decision.Limits {
		limits = append(limits, o.Name)
	}
	level := slog.LevelInfo
	if s.Err != nil {
		level = slog.LevelError
	}
	p.log.Log(context.Background(), level, "call", "request_id", c.id, "api", c.kind.String(), "model", c.est.Model,
		"key", c.who(), "status", c.status,
		"estimate_tokens", s.Reserved, "estimate_usd", config.FormatUSD(s.ReservedSpend),
		"grown_tokens", s.Grown, "grown_usd", config.FormatUSD(s.GrownSpend),
		"tokens", s.Actual, "input_tokens", s.Input, "cached_input_tokens", s.Cached, "cache_write_tokens", s.CacheWrite,
		"output_tokens", s.Output, "reasoning_tokens", s.Reasoning, "charged", charged, "usd", config.FormatUSD(s.Spend),
		"basis", string(s.Basis), "stopped", s.Stopped, "limits", limits, "error", s.Err)
}
