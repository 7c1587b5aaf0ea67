package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/proxy"
	"github.com/tokenlimit/tokenlimit/proxy/costexpr"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/service"
)

// benchConfig is examples/proxy.yaml's shape with budgets no benchmark
// exhausts.
const benchConfig = `
limits:
  - {name: tokens-per-key-model, key: [api_key, model], algorithm: token_bucket, capacity: 1000000000, refill: 1000000000/min, cost: request}
  - {name: requests-per-key, key: [api_key], algorithm: token_bucket, capacity: 100000000, refill: 100000000/min, cost: 1}
  - {name: in-flight-per-key, key: [api_key], algorithm: concurrency, limit: 1000, lease: 10m}
`

// prompt2000 is a prompt of 2,000 tokens under o200k_base.
var prompt2000 = func() string {
	words := strings.Fields(`Rate limits protect an API from overload and share its capacity fairly between
		its users. A token bucket admits bursts up to its capacity and refills at a steady rate, while a
		sliding window counts what each user consumed over the last minute. For language models the cost
		of a call is the number of tokens it reads and writes, known exactly only once the call is over.`)
	var sb strings.Builder
	for i := 0; ; i++ {
		next := sb.String() + " " + words[i%len(words)]
		if n, _ := proxy.TestTokenizer.Count("gpt-4o", next); n > 2000 {
			return sb.String()
		}
		sb.WriteString(" " + words[i%len(words)])
	}
}()

// BenchmarkTokenize counts a 2,000-token prompt; ns/1k-tokens is the cost
// per 1,000 tokens.
func BenchmarkTokenize(b *testing.B) {
	for _, model := range []string{"gpt-4o", "gpt-4"} {
		b.Run(model, func(b *testing.B) {
			n, _ := proxy.TestTokenizer.Count(model, prompt2000)
			for b.Loop() {
				_, _ = proxy.TestTokenizer.Count(model, prompt2000)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n)*1000, "ns/1k-tokens")
			b.ReportMetric(float64(n), "tokens")
		})
	}
}

// BenchmarkTokenizeLongPiece counts 1 MiB made of one piece (a run of
// letters, or of spaces), the worst case of the byte-pair merge: its cost
// grows linearly with the text, not with its square.
func BenchmarkTokenizeLongPiece(b *testing.B) {
	for name, text := range map[string]string{"letters": strings.Repeat("a", 1<<20), "spaces": strings.Repeat(" ", 1<<20)} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				_, _ = proxy.TestTokenizer.Count("gpt-4o", text)
			}
		})
	}
}

// benchEnv is a proxy in front of the fake upstream, on a real clock.
type benchEnv struct {
	up, proxied *httptest.Server
	client      *http.Client
}

func newBenchEnv(b *testing.B, store string) *benchEnv {
	return newBenchEnvWith(b, store, benchConfig, newFakeUpstream())
}

// newBenchEnvWith is newBenchEnv with a configuration and an upstream.
func newBenchEnvWith(b *testing.B, store, yml string, up *fakeUpstream) *benchEnv {
	cfg, err := config.ParseWith([]byte(yml), "bench.yaml", config.Options{Compile: costexpr.Compile})
	if err != nil {
		b.Fatal(err)
	}
	opts := service.Options{Logger: testkit.Quiet()}
	switch store {
	case "memory":
		opts.Store = testkit.MemStore(b)
	case "redis":
		srv := redistest.Start(b)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		b.Cleanup(func() { client.Close() })
		var st tokenlimit.Store
		if st, err = redisstore.New(goredisclient.New(client), redisstore.Options{}); err != nil {
			b.Fatal(err)
		}
		opts.Store = st
	}
	svc, err := service.New(cfg, opts)
	if err != nil {
		b.Fatal(err)
	}
	e := &benchEnv{up: httptest.NewServer(up)}
	b.Cleanup(e.up.Close)
	u, _ := url.Parse(e.up.URL)
	p, err := proxy.New(svc, proxy.Options{Upstream: u, UnknownKeys: proxy.DefaultPlanForUnknownKeys, Tokenizer: proxy.TestTokenizer, Logger: testkit.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	e.proxied = httptest.NewServer(p)
	b.Cleanup(e.proxied.Close)
	e.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	return e
}

// call posts body to base's chat completions and returns the time to the
// first byte of the body and to its end.
func (e *benchEnv) call(b *testing.B, base, body string) (ttfb, total time.Duration) {
	return e.callPath(b, base, "/v1/chat/completions", body)
}

// callPath is call for the API at path.
func (e *benchEnv) callPath(b *testing.B, base, path, body string) (ttfb, total time.Duration) {
	start := time.Now()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-bench-0001")
	resp, err := e.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.Peek(1); err != nil {
		b.Fatal(err)
	}
	ttfb = time.Since(start)
	_, _ = io.Copy(io.Discard, br)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
	return ttfb, time.Since(start)
}

// BenchmarkProxyOverhead calls the fake upstream directly and through the
// proxy, alternately, with a 2,000-token prompt, and reports each one's
// p50/p99 latency and the proxy's added p50/p99 (proxied minus direct, per
// percentile); for streams the time to first byte (ttfb). The added time
// includes counting the prompt (BenchmarkTokenize).
func BenchmarkProxyOverhead(b *testing.B) {
	msg, _ := json.Marshal(prompt2000)
	for _, store := range []string{"memory", "redis"} {
		for _, stream := range []bool{false, true} {
			name := store + "/" + map[bool]string{false: "plain", true: "stream"}[stream]
			b.Run(name, func(b *testing.B) {
				e := newBenchEnv(b, store)
				body := `{"model":"gpt-4o","max_tokens":100,"stream":` + map[bool]string{false: "false", true: "true"}[stream] +
					`,"messages":[{"role":"user","content":` + string(msg) + `}]}`
				e.call(b, e.up.URL, body) // warm connections
				e.call(b, e.proxied.URL, body)
				var direct, proxied []time.Duration
				for b.Loop() {
					dt, d := e.call(b, e.up.URL, body)
					pt, p := e.call(b, e.proxied.URL, body)
					if stream {
						d, p = dt, pt
					}
					direct, proxied = append(direct, d), append(proxied, p)
				}
				what := "latency"
				if stream {
					what = "ttfb"
				}
				dp50, dp99 := percentiles(direct)
				pp50, pp99 := percentiles(proxied)
				b.ReportMetric(us(dp50), "direct-p50-"+what+"-µs")
				b.ReportMetric(us(dp99), "direct-p99-"+what+"-µs")
				b.ReportMetric(us(pp50), "proxied-p50-"+what+"-µs")
				b.ReportMetric(us(pp99), "proxied-p99-"+what+"-µs")
				b.ReportMetric(us(pp50-dp50), "added-p50-µs")
				b.ReportMetric(us(pp99-dp99), "added-p99-µs")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(d)
	return d[len(d)*50/100], d[min(len(d)-1, len(d)*99/100)]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// benchAPIs are the APIs BenchmarkProxyAPIs compares, each with a
// 2,000-token prompt and 100 reply tokens.
var benchAPIs = func() []struct{ name, path, body string } {
	msg, _ := json.Marshal(prompt2000)
	return []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":` + string(msg) + `}]}`},
		{"responses", "/v1/responses", `{"model":"gpt-4o","max_output_tokens":100,"input":` + string(msg) + `}`},
		{"messages", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":` + string(msg) + `}]}`},
	}
}()

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProxyAPIs calls each API (plain and streamed) on the embedded
// store directly and through the proxy, in alternating runs of 10 calls,
// and reports the added p50 latency (time to first byte for streams) and
// the added CPU per call: the process's CPU time (client, proxy and fake
// upstream all in it) over the proxied calls minus over the direct ones.
func BenchmarkProxyAPIs(b *testing.B) {
	for _, api := range benchAPIs {
		for _, stream := range []bool{false, true} {
			b.Run(api.name+"/"+map[bool]string{false: "plain", true: "stream"}[stream], func(b *testing.B) {
				e := newBenchEnv(b, "memory")
				body := api.body
				if stream {
					body = strings.Replace(body, `{`, `{"stream":true,`, 1)
				}
				one := func(base string) time.Duration {
					ttfb, total := e.callPath(b, base, api.path, body)
					if stream {
						return ttfb
					}
					return total
				}
				one(e.up.URL) // warm connections and the encoding
				one(e.proxied.URL)
				var direct, proxied []time.Duration
				var directCPU, proxiedCPU time.Duration
				for b.Loop() {
					c := cpuTime(b)
					for range 10 {
						direct = append(direct, one(e.up.URL))
					}
					c2 := cpuTime(b)
					for range 10 {
						proxied = append(proxied, one(e.proxied.URL))
					}
					directCPU += c2 - c
					proxiedCPU += cpuTime(b) - c2
				}
				dp50, _ := percentiles(direct)
				pp50, _ := percentiles(proxied)
				b.ReportMetric(us(dp50), "direct-p50-µs")
				b.ReportMetric(us(pp50-dp50), "added-p50-µs")
				b.ReportMetric(us((proxiedCPU-directCPU)/time.Duration(len(proxied))), "added-cpu-µs/call")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkCostExpression calls chat completions (2,000-token prompt,
// plain) directly and through three proxies on the embedded store, in
// alternating runs of 10 calls each, that differ only in the cost of their
// token limit: cost: request, a class (cost: output_tokens, no CEL) and a
// CEL expression. It reports each proxy's added CPU per call (the
// process's CPU over its calls minus over the direct ones, as in
// BenchmarkProxyAPIs) and the class's and expression's over request's
// (issue 21 wants the expression's at most 1.1x).
func BenchmarkCostExpression(b *testing.B) {
	costs := []struct{ name, cost string }{
		{"request", "request"},
		{"class", "output_tokens"},
		{"expr", `{expr: 'model == "o3" ? 2 * total_tokens : total_tokens'}`},
	}
	envs := make([]*benchEnv, len(costs))
	for i, c := range costs {
		envs[i] = newBenchEnvWith(b, "memory", strings.Replace(benchConfig, "cost: request", "cost: "+c.cost, 1), newFakeUpstream())
	}
	body := benchAPIs[0].body
	run := func(e *benchEnv, base string) time.Duration {
		c := cpuTime(b)
		for range 10 {
			e.call(b, base, body)
		}
		return cpuTime(b) - c
	}
	for _, e := range envs { // warm connections and the encoding
		e.call(b, e.up.URL, body)
		e.call(b, e.proxied.URL, body)
	}
	var direct time.Duration
	proxied := make([]time.Duration, len(envs))
	calls := 0
	for b.Loop() {
		for i, e := range envs {
			direct += run(e, e.up.URL)
			proxied[i] += run(e, e.proxied.URL)
		}
		calls += 10
	}
	added := func(i int) float64 { return us((proxied[i] - direct/time.Duration(len(envs))) / time.Duration(calls)) }
	for i, c := range costs {
		b.ReportMetric(added(i), c.name+"-added-cpu-µs/call")
	}
	b.ReportMetric(added(1)/added(0), "class/request-x")
	b.ReportMetric(added(2)/added(0), "expr/request-x")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkStreamCounting streams 2,000 deltas of one token each through
// the proxy on the embedded store, in alternating runs of 5 calls, with a
// budget that stops streams (on_exhaust: stop) or lets them finish:
//   - uncounted: the reply (12,000 bytes) fits in its estimate (max_tokens
//     20,000) by its bytes alone: no delta is counted.
//   - counted: max_tokens 10, so that the stream passes its estimate at
//     once and is counted as it goes, growing its reservation 4 times.
//   - finish: max_tokens 10 under a budget with on_exhaust: finish: the
//     first growth finds no budget to stop at, and counting ends.
//
// It reports each one's CPU per call (the process's: client, proxy and
// fake upstream, over the run), and counted-extra-%: what counting and
// growing added to the uncounted call's CPU.
func BenchmarkStreamCounting(b *testing.B) {
	const yml = `
limits:
  - {name: tokens, key: [api_key], algorithm: token_bucket, capacity: 1000000000, refill: 1000000000/min%s}
  - {name: requests-per-key, key: [api_key], algorithm: token_bucket, capacity: 100000000, refill: 100000000/min, cost: 1}
`
	up := newFakeUpstream()
	up.set(func(b *behaviour) { b.Words = strings.Split(strings.Repeat(" hello|", 2000), "|")[:2000] })
	stop := newBenchEnvWith(b, "memory", fmt.Sprintf(yml, ""), up)
	finish := newBenchEnvWith(b, "memory", fmt.Sprintf(yml, ", on_exhaust: finish"), up)
	body := func(maxTokens int) string {
		return `{"model":"gpt-4o","stream":true,"max_tokens":` + strconv.Itoa(maxTokens) + `,"messages":[{"role":"user","content":"Say hello"}]}`
	}
	runs := []struct {
		name string
		e    *benchEnv
		body string
		cpu  time.Duration
		n    int
	}{{"uncounted", stop, body(20000), 0, 0}, {"counted", stop, body(10), 0, 0}, {"finish", finish, body(10), 0, 0}}
	for i := range runs {
		runs[i].e.callPath(b, runs[i].e.proxied.URL, "/v1/chat/completions", runs[i].body) // warm up
	}
	for b.Loop() {
		for i := range runs {
			r := &runs[i]
			c := cpuTime(b)
			for range 5 {
				r.e.callPath(b, r.e.proxied.URL, "/v1/chat/completions", r.body)
			}
			r.cpu += cpuTime(b) - c
			r.n += 5
		}
	}
	for _, r := range runs {
		b.ReportMetric(us(r.cpu/time.Duration(r.n)), r.name+"-cpu-µs/call")
	}
	base := float64(runs[0].cpu) / float64(runs[0].n)
	b.ReportMetric((float64(runs[1].cpu)/float64(runs[1].n)-base)/base*100, "counted-extra-%")
	b.ReportMetric(0, "ns/op")
}
