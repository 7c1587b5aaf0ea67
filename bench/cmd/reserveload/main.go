// Command reserveload measures reservations through `tokenlimit serve` as a
// caller sees them: POST /v1/reserve then POST /v1/settle of the same id,
// over HTTP on loopback, on Redis, side by side for two builds of
// tokenlimit (-before and -after, two binaries).
//
// It starts one redis-server on a free 127.0.0.1 port (never a system
// Redis) and both binaries as `serve` child processes on it, each with its
// own users so their keys never meet, a token bucket that always admits,
// and --store-timeout 1s so that the store's failure modes stay out of the
// figures. Then, for -runs rounds, it alternates the two builds (the order
// flips every round), and for each of -callers sends reserve+settle pairs
// closed loop (each caller sends its next pair when the previous one has
// answered, over its own keep-alive connection) for -duration. It reports
// per build and caller count the medians over the rounds of: pairs per
// second, the 50th and 99th percentile time of one pair, and the CPU time
// per pair of the serve process and of redis-server. Every answer must be
// 200; any other counts as an error and is reported. Usage, from bench/:
//
//	go run ./cmd/reserveload -before /tmp/tokenlimit-old -after /tmp/tokenlimit-new > reserve.md
//
// Figures swing on shared machines: compare only within one run.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tokenlimit/tokenlimit/bench/internal/redisserver"
	"github.com/tokenlimit/tokenlimit/bench/internal/runstat"
)

// config always admits: 100 reserved and 60 settled per pair never come
// near a million tokens refilling a million a second.
const config = `limits:
  - name: tokens
    key: [user]
    algorithm: token_bucket
    capacity: 1000000
    refill: 1000000/s
    cost: request
`

type options struct {
	before, after string
	redisBin      string
	callers       []int
	duration      time.Duration
	runs          int
	users         int
}

func main() {
	var o options
	var callers string
	flag.StringVar(&o.before, "before", "", "the tokenlimit binary before the change (required)")
	flag.StringVar(&o.after, "after", "", "the tokenlimit binary after the change (required)")
	flag.StringVar(&o.redisBin, "redis-server", "redis-server", "the redis-server binary")
	flag.StringVar(&callers, "callers", "1,64", "concurrent callers, comma-separated")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "how long each slice sends pairs")
	flag.IntVar(&o.runs, "runs", 5, "rounds; each runs every build at every caller count once")
	flag.IntVar(&o.users, "users", 1000, "distinct users per build")
	flag.Parse()
	for _, c := range strings.Split(callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			fatal(fmt.Errorf("-callers: %q is not a positive count", c))
		}
		o.callers = append(o.callers, n)
	}
	if o.before == "" || o.after == "" || o.runs < 1 || o.users < 1 || o.duration <= 0 {
		fatal(errors.New("-before and -after are required; -runs, -users and -duration must be positive"))
	}
	if err := run(o); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "reserveload:", err)
	os.Exit(1)
}

// build is one binary serving on the shared Redis.
type build struct {
	name string
	base string
	cmd  *exec.Cmd
	// slices[callers] holds one result per round.
	slices map[int][]slice
}

func run(o options) error {
	loadBefore, _ := os.ReadFile("/proc/loadavg")
	srv, err := redisserver.Start(o.redisBin)
	if err != nil {
		return err
	}
	defer srv.Stop()
	dir, err := os.MkdirTemp("", "reserveload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return err
	}
	var builds []*build
	for _, b := range []struct{ name, bin string }{{"before", o.before}, {"after", o.after}} {
		bl, err := startServe(b.name, b.bin, cfg, srv.Addr())
		if err != nil {
			return err
		}
		defer bl.stop()
		builds = append(builds, bl)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
	for _, b := range builds { // every key exists, every script is loaded
		if s := b.load(client, srv, o.users, 8, 500*time.Millisecond, -1); s.errors > 0 {
			return fmt.Errorf("%s: warm-up: %d errors, first: %s", b.name, s.errors, s.firstErr)
		}
	}
	for r := range o.runs {
		order := builds
		if r%2 == 1 {
			order = []*build{builds[1], builds[0]}
		}
		for _, c := range o.callers {
			for _, b := range order {
				s := b.load(client, srv, o.users, c, o.duration, r)
				b.slices[c] = append(b.slices[c], s)
				fmt.Fprintf(os.Stderr, "round %d, %s, %d callers: %.0f pairs/s, p99 %s, %d errors\n", r+1, b.name, c, s.rate(), s.p99, s.errors)
			}
		}
	}
	loadAfter, _ := os.ReadFile("/proc/loadavg")
	report(os.Stdout, o, builds, strings.TrimSpace(string(loadBefore)), strings.TrimSpace(string(loadAfter)))
	return nil
}

// startServe starts bin serve on the Redis at addr and waits for its
// "serving HTTP" log line.
func startServe(name, bin, cfg, addr string) (*build, error) {
	cmd := exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--grpc-listen", "",
		"--redis", "redis://"+addr, "--store-timeout", "1s", "--reload-every", "0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	b := &build{name: name, cmd: cmd, slices: map[int][]slice{}}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving HTTP" {
				found <- line.Addr
				break
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case a := <-found:
		b.base = "http://" + a
		return b, nil
	case <-time.After(30 * time.Second):
		b.stop()
		return nil, fmt.Errorf("%s: no \"serving HTTP\" log line in 30 s", name)
	}
}

func (b *build) stop() {
	b.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		b.cmd.Process.Kill()
		<-done
	}
}

// slice is what one build did at one caller count for one duration.
type slice struct {
	pairs    int
	took     time.Duration
	p50, p99 time.Duration
	serveCPU time.Duration // per pair
	redisCPU time.Duration // per pair
	errors   int
	firstErr string
}

func (s slice) rate() float64 { return float64(s.pairs) / s.took.Seconds() }

// load sends reserve+settle pairs from callers goroutines for d; round
// names the ids (-1 for the warm-up).
func (b *build) load(client *http.Client, srv *redisserver.Server, users, callers int, d time.Duration, round int) slice {
	var (
		mu    sync.Mutex
		lat   []time.Duration
		s     slice
		wg    sync.WaitGroup
		start = time.Now()
		end   = start.Add(d)
	)
	serve0, _ := runstat.CPUTime(b.cmd.Process.Pid)
	redis0 := redisCPU(srv)
	for c := range callers {
		wg.Go(func() {
			var mine []time.Duration
			var errs int
			var first string
			for i := 0; time.Now().Before(end); i++ {
				id := fmt.Sprintf("%s-%d-%d-%d", b.name, round, c, i)
				user := fmt.Sprintf("%s-u%d", b.name, (c*7919+i)%users)
				t0 := time.Now()
				err := post(client, b.base+"/v1/reserve", fmt.Sprintf(`{"id":%q,"descriptors":{"user":%q},"cost":100}`, id, user))
				if err == nil {
					err = post(client, b.base+"/v1/settle", fmt.Sprintf(`{"id":%q,"actual":60}`, id))
				}
				if err != nil {
					if errs == 0 {
						first = err.Error()
					}
					errs++
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, mine...)
			if s.errors == 0 {
				s.firstErr = first
			}
			s.errors += errs
		})
	}
	wg.Wait()
	s.took = time.Since(start)
	s.pairs = len(lat)
	if s.pairs == 0 {
		return s
	}
	serve1, _ := runstat.CPUTime(b.cmd.Process.Pid)
	s.serveCPU = (serve1 - serve0) / time.Duration(s.pairs)
	s.redisCPU = (redisCPU(srv) - redis0) / time.Duration(s.pairs)
	slices.Sort(lat)
	s.p50 = lat[len(lat)/2]
	s.p99 = lat[min(len(lat)-1, len(lat)*99/100)]
	return s
}

var body200 = []byte(`"allowed":true`)

// post sends body and fails unless the answer is 200 (and, for a reserve,
// allowed).
func post(client *http.Client, url, body string) error {
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || strings.HasSuffix(url, "/reserve") && !bytes.Contains(raw, body200) {
		return fmt.Errorf("%s: %s %s", url, resp.Status, raw)
	}
	return nil
}

// redisCPU returns redis-server's CPU time so far (INFO cpu), 0 if unknown.
func redisCPU(srv *redisserver.Server) time.Duration {
	info, err := srv.Do("INFO", "cpu")
	if err != nil {
		return 0
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

func report(w io.Writer, o options, builds []*build, loadBefore, loadAfter string) {
	fmt.Fprintf(w, "reserve+settle pairs over HTTP on Redis, %d rounds of %s per build and caller count, builds alternating\n\n", o.runs, o.duration)
	fmt.Fprintf(w, "load average before: %s; after: %s\n\n", loadBefore, loadAfter)
	fmt.Fprintln(w, "| callers | build | pairs/s (median) | p50 | p99 | serve CPU/pair | redis CPU/pair | errors | pairs/s per round |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, c := range o.callers {
		for _, b := range builds {
			ss := b.slices[c]
			var rates []float64
			var p50, p99, scpu, rcpu []time.Duration
			errs := 0
			var each []string
			for _, s := range ss {
				rates = append(rates, s.rate())
				p50, p99 = append(p50, s.p50), append(p99, s.p99)
				scpu, rcpu = append(scpu, s.serveCPU), append(rcpu, s.redisCPU)
				errs += s.errors
				each = append(each, fmt.Sprintf("%.0f", s.rate()))
			}
			fmt.Fprintf(w, "| %d | %s | %.0f | %s | %s | %s | %s | %d | %s |\n", c, b.name, runstat.Median(rates),
				runstat.Median(p50).Round(time.Microsecond), runstat.Median(p99).Round(time.Microsecond),
				runstat.Median(scpu).Round(time.Microsecond), runstat.Median(rcpu).Round(time.Microsecond), errs, strings.Join(each, ", "))
		}
	}
}
