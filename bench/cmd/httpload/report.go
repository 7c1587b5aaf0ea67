package main

import (
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"
)

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return strings.TrimSpace(string(out)), err
}

// stat is the median of one figure over the runs, with its range.
type stat struct{ med, lo, hi float64 }

func statOf(v []float64) stat {
	if len(v) == 0 {
		return stat{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{m, s[0], s[len(s)-1]}
}

// over collects f of cell i of every run.
func over(cells [][]*cell, i int, f func(*cell) float64) stat {
	var v []float64
	for _, row := range cells {
		v = append(v, f(row[i]))
	}
	return statOf(v)
}

func rateText(s stat, runs int) string {
	t := fmt.Sprintf("%.1fk/s", s.med/1e3)
	if runs > 1 {
		t += fmt.Sprintf(" [%.1f–%.1fk]", s.lo/1e3, s.hi/1e3)
	}
	return t
}

func durText(d time.Duration) string {
	switch {
	case d < 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.1fms", float64(d)/1e6)
}

func latText(s stat, runs int) string {
	t := durText(time.Duration(s.med))
	if runs > 1 {
		t += " [" + durText(time.Duration(s.lo)) + "–" + durText(time.Duration(s.hi)) + "]"
	}
	return t
}

func apiName(api string) string {
	if api == "grpc" {
		return "gRPC ShouldRateLimit"
	}
	return "HTTP POST /v1/check"
}

func writeReport(w io.Writer, o options, m machine, wake [][]time.Duration, cells [][]*cell) {
	runs := len(cells)
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## tokenlimit serve under load (httpload)\n\n")
	p("| | |\n|---|---|\n")
	p("| CPUs | %d, %s |\n", m.cpus, or(m.model, "model not reported"))
	p("| Go | %s |\n", m.goVersion)
	if m.redis != "" {
		p("| Redis | `%s` |\n", m.redis)
	}
	p("| source | %s (`git describe --always --dirty` of the working tree built) |\n", or(m.commit, "unknown"))
	where := "`tokenlimit serve` (built from that working tree) as a child process; the load generator in another process"
	if m.server == "inprocess" {
		where = "in the load generator's process (service.New, httpapi.New, rlsv3.Register, as cli/serve.go wires them)"
		if o.grpcWorkers > 0 {
			where += fmt.Sprintf(", gRPC with grpc.NumStreamWorkers(%d)", o.grpcWorkers)
		}
	}
	p("| service | %s; client, service and redis-server share the CPUs, over loopback |\n", where)
	p("| load | %d users (one key each), descriptors {user, route: /v1/chat}, limits of %s; peak over %v of closed loop per level; open loop for %v per rate, up to %d calls in flight |\n",
		o.users, or(o.configPath, "bench.yaml (quickstart, llm-budget made generous)"), o.peakDuration, o.duration, o.workers)
	hc := "a minimal HTTP/1.1 client (prepared requests, one keep-alive connection per caller, like wrk)"
	if o.httpClient == "net" {
		hc = "net/http's client (keep-alive, one shared Transport)"
	}
	p("| clients | HTTP: %s; gRPC: the generated client (grpc-go) on one HTTP/2 connection |\n", hc)
	p("| runs | %d (medians, range in brackets) |\n", runs)
	p("| load average | %s before, %s after |\n\n", m.loadBefore, m.loadAfter)

	p("### Throughput by concurrent keep-alive callers (closed loop)\n\n")
	p("Calls per second, and in brackets the p99 latency at that level.\n\n")
	p("| store | API |")
	for _, n := range o.clients {
		p(" %d |", n)
	}
	p(" peak | allowed |\n|---|---|")
	for range o.clients {
		p("---:|")
	}
	p("---:|---:|\n")
	for i, c := range cells[0] {
		p("| %s | %s |", c.store, apiName(c.api))
		for li := range o.clients {
			r := over(cells, i, func(c *cell) float64 { return c.levels[li].perSecond() })
			l := over(cells, i, func(c *cell) float64 { return float64(c.levels[li].lat[1]) })
			p(" %.1fk (%s) |", r.med/1e3, durText(time.Duration(l.med)))
		}
		peak := over(cells, i, func(c *cell) float64 { return c.levels[c.peak].perSecond() })
		allowed := over(cells, i, func(c *cell) float64 {
			a, n := 0, 0
			for _, t := range c.levels {
				a, n = a+t.allowed, n+t.calls
			}
			return 100 * float64(a) / float64(max(1, n))
		})
		p(" %s | %.1f%% |\n", rateText(peak, runs), allowed.med)
	}

	p("\n### The machine's own wake-up lag\n\n")
	p("Before each run, with no load from this tool: a thread that sleeps until each of 10,000 deadlines per second for 2 s (as the open loop's pacer does) wakes this late. No latency below can be told apart from it.\n\n")
	p("| p50 | p90 | p99 | p99.9 | max |\n|---:|---:|---:|---:|---:|\n")
	wq := func(x float64) string {
		var v []float64
		for _, l := range wake {
			v = append(v, float64(quantile(l, x)))
		}
		return latText(statOf(v), runs)
	}
	p("| %s | %s | %s | %s | %s |\n", wq(0.5), wq(0.9), wq(0.99), wq(0.999), wq(1))

	p("\n### Latency at a constant rate (open loop)\n\n")
	p("Calls sent on a fixed schedule at a share of the peak above. Latency is timed from each call's scheduled send time, so that a stall counts against every call it delays; \"from send\" times the same calls from when they were actually sent; \"pacer\" is how late the scheduler itself queued calls (p99), a part of the first. Target: p99 under 1 ms at 50%% of the peak.\n\n")
	p("| store | API | share | rate | p50 | p99 | p99.9 | max | p99 from send | pacer p99 | allowed | p99 < 1 ms |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	row := func(i int, name string, share float64, floor bool, get func(*cell) *tally) {
		c := cells[0][i]
		q := func(f func(t *tally) []time.Duration, x float64) stat {
			return over(cells, i, func(c *cell) float64 { return float64(quantile(f(get(c)), x)) })
		}
		lat := func(t *tally) []time.Duration { return t.lat }
		p99 := q(lat, 0.99)
		verdict := "**met**"
		switch {
		case floor:
			verdict = "(floor)"
		case share != 0.5:
			verdict = "(reference)"
		case p99.med >= float64(time.Millisecond):
			verdict = "**not met**"
		}
		rate := over(cells, i, func(c *cell) float64 { return get(c).rate })
		allowed := over(cells, i, func(c *cell) float64 { return 100 * float64(get(c).allowed) / float64(max(1, get(c).calls)) })
		p("| %s | %s | %.0f%% | %s | %s | %s | %s | %s | %s | %s | %.1f%% | %s |\n", c.store, name, share*100, rateText(rate, runs),
			latText(q(lat, 0.5), runs), latText(p99, runs), latText(q(lat, 0.999), runs), latText(q(lat, 1), runs),
			latText(q(func(t *tally) []time.Duration { return t.service }, 0.99), runs),
			latText(q(func(t *tally) []time.Duration { return t.pacerLag }, 0.99), runs),
			allowed.med, verdict)
	}
	for i, c := range cells[0] {
		for k, share := range o.shares {
			row(i, apiName(c.api), share, false, func(c *cell) *tally { return c.open[k] })
			if c.floor != nil {
				row(i, "HTTP GET /healthz (no decision)", share, true, func(c *cell) *tally { return c.floor[k] })
			}
		}
	}

	p("\n### CPU time per call\n\n")
	p("CPU time (user + system, from /proc) that each process used during the peak level and during each open loop, divided by the calls made; \"busy\" is how many of the %d CPUs the three kept busy together.\n\n", m.cpus)
	p("| store | API | phase | load generator | tokenlimit | redis-server | total | busy |\n")
	p("|---|---|---|---:|---:|---:|---:|---:|\n")
	type phase struct {
		name string
		cpu  func(*cell) []time.Duration
		t    func(*cell) *tally
	}
	for i, c := range cells[0] {
		phases := []phase{{"peak", func(c *cell) []time.Duration { return c.peakCPU }, func(c *cell) *tally { return c.levels[c.peak] }}}
		for k, share := range o.shares {
			phases = append(phases, phase{fmt.Sprintf("open loop at %.0f%%", share*100),
				func(c *cell) []time.Duration { return c.openCPU[k] }, func(c *cell) *tally { return c.open[k] }})
		}
		for _, ph := range phases {
			per := func(k int) string {
				if ph.cpu(c)[k] < 0 {
					return "–"
				}
				s := over(cells, i, func(c *cell) float64 { return float64(ph.cpu(c)[k]) / float64(max(1, ph.t(c).calls)) })
				return fmt.Sprintf("%.1f µs", s.med/1e3)
			}
			sum := func(c *cell) float64 {
				var d time.Duration
				for _, x := range ph.cpu(c) {
					d += max(0, x)
				}
				return float64(d)
			}
			total := over(cells, i, func(c *cell) float64 { return sum(c) / float64(max(1, ph.t(c).calls)) })
			busy := over(cells, i, func(c *cell) float64 { return sum(c) / float64(ph.t(c).elapsed) })
			client, service := per(0), per(1)
			if m.server == "inprocess" {
				client, service = "(in total)", "(in total)"
			}
			p("| %s | %s | %s | %s | %s | %s | %.1f µs | %.2f |\n", c.store, apiName(c.api), ph.name, client, service, per(2), total.med/1e3, busy.med)
		}
	}
	p("\nLoad average at the end: %s. Absolute figures swing with the machine's other load: compare only within one run.\n", m.loadAfter)
}

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
