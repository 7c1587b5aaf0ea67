package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
)

// benchFlags are the options of `tokenlimit bench`.
type benchFlags struct {
	server      string
	duration    time.Duration
	concurrency int
	users       int
	descriptors []string
	cost        int64
}

func benchCommand() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load a running server's /v1/check and report decisions/s and latency, with a progress bar",
		Long: `Send POST /v1/check from several concurrent keep-alive clients for a fixed
time, spreading requests over a number of users (descriptor user=u<N>), and
report decisions per second, allowed and denied answers, and latency
percentiles. It stops by itself after --duration. The progress bar is drawn
only on a terminal; into a file or a pipe it writes a start line and the
summary.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			return runBench(cmd.Context(), f, out, isTerminal(out))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.server, "server", "http://127.0.0.1:8080", "the tokenlimit server's base URL")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "how long to send load (at most 10m)")
	fl.IntVar(&f.concurrency, "concurrency", 16, "concurrent clients (1..1024)")
	fl.IntVar(&f.users, "users", 1000, "distinct users the requests are spread over (1..1e6)")
	fl.StringArrayVarP(&f.descriptors, "descriptor", "d", nil, "a descriptor added to every request, name=value (repeatable)")
	fl.Int64Var(&f.cost, "cost", 0, "each request's own cost (0 means 1)")
	return cmd
}

// maxSamples bounds the latencies kept; past it a reservoir sample of
// them is kept, so a long run's memory stays bounded.
const maxSamples = 1 << 20

// benchTally is what the clients count, shared.
type benchTally struct {
	allowed, denied, failed atomic.Int64
	mu                      sync.Mutex
	latencies               []time.Duration
	seen                    int
	firstErr                error // the first failure, as it was; nil while none failed
}

// record counts one answer: a 200 is allowed, a 429 denied, any other
// status or an error failed (and only a decision's latency is kept).
func (b *benchTally) record(status int, took time.Duration, err error) {
	if err == nil && status != http.StatusOK && status != http.StatusTooManyRequests {
		err = fmt.Errorf("HTTP %d %s", status, http.StatusText(status))
	}
	switch {
	case err != nil:
		b.failed.Add(1)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.firstErr == nil {
			b.firstErr = err
		}
		return
	case status == http.StatusOK:
		b.allowed.Add(1)
	default:
		b.denied.Add(1)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seen++
	if len(b.latencies) < maxSamples {
		b.latencies = append(b.latencies, took)
	} else if i := rand.IntN(b.seen); i < maxSamples {
		b.latencies[i] = took
	}
}

// decisions counts the answers that were a decision: allowed or denied.
func (b *benchTally) decisions() int64 { return b.allowed.Load() + b.denied.Load() }

// failure is the first failure, nil while none failed.
func (b *benchTally) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.firstErr
}

// runBench loads the server and writes the summary to out, drawing a
// progress bar when tty (out is a terminal: the bar redraws its line with
// carriage returns).
func runBench(ctx context.Context, f benchFlags, out io.Writer, tty bool) error {
	switch {
	case f.duration <= 0 || f.duration > 10*time.Minute:
		return fmt.Errorf("--duration: want (0, 10m], got %s: %w", f.duration, errUsage)
	case f.concurrency < 1 || f.concurrency > 1024:
		return fmt.Errorf("--concurrency: want 1..1024, got %d: %w", f.concurrency, errUsage)
	case f.users < 1 || f.users > 1_000_000:
		return fmt.Errorf("--users: want 1..1000000, got %d: %w", f.users, errUsage)
	}
	extra, err := parseDescriptors(f.descriptors)
	if err != nil {
		return err
	}
	url := strings.TrimSuffix(f.server, "/") + "/v1/check"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: f.concurrency}, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, f.duration)
	defer cancel()
	var tally benchTally
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range f.concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				body := benchBody(int(next.Add(1))%f.users, extra, f.cost)
				t0 := time.Now()
				status, err := post(ctx, client, url, body)
				if ctx.Err() != nil {
					return // the run ended during this call: not a result
				}
				tally.record(status, time.Since(t0), err)
			}
		})
	}
	if tty {
		progress(ctx, out, start, f.duration, &tally)
	} else {
		fmt.Fprintf(out, "loading %s for %s with %d clients over %d users\n", url, f.duration, f.concurrency, f.users)
		<-ctx.Done()
	}
	wg.Wait()
	if tty { // the bar's last drawing counts every answer, as the summary does
		drawBar(out, time.Since(start), f.duration, &tally)
		fmt.Fprintln(out)
	}
	summarize(out, time.Since(start), &tally)
	if tally.decisions() == 0 {
		if err := tally.failure(); err != nil {
			return fmt.Errorf("no request to %s was decided: %w", url, err)
		}
		return fmt.Errorf("no request to %s was decided", url)
	}
	return nil
}

func benchBody(user int, extra map[string]string, cost int64) []byte {
	desc := map[string]string{"user": "u" + strconv.Itoa(user)}
	for k, v := range extra {
		desc[k] = v
	}
	data, _ := json.Marshal(map[string]any{"descriptors": desc, "cost": cost}) // maps of strings always marshal
	return data
}

func post(ctx context.Context, client *http.Client, url string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body) // drain, so the connection is reused
	resp.Body.Close()
	return resp.StatusCode, nil
}

// progress draws a progress bar on one line, at once and then twice a
// second, until ctx ends.
func progress(ctx context.Context, out io.Writer, start time.Time, d time.Duration, t *benchTally) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		drawBar(out, time.Since(start), d, t)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// drawBar redraws the progress bar's line, elapsed into a run of d:
// decisions/s so far, allowed, denied and failed.
func drawBar(out io.Writer, elapsed, d time.Duration, t *benchTally) {
	done := int(min(1, elapsed.Seconds()/d.Seconds()) * 30)
	fmt.Fprintf(out, "\r[%s%s] %5.1fs  %.0f decisions/s  allowed %d  denied %d  failed %d", strings.Repeat("#", done), strings.Repeat(".", 30-done),
		elapsed.Seconds(), float64(t.decisions())/max(elapsed.Seconds(), 1e-3), t.allowed.Load(), t.denied.Load(), t.failed.Load())
}

func summarize(out io.Writer, took time.Duration, t *benchTally) {
	lat := slices.Clone(t.latencies)
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	fmt.Fprintf(out, "%d decisions in %s: %.0f decisions/s\n", t.decisions(), took.Round(time.Millisecond), float64(t.decisions())/took.Seconds())
	fmt.Fprintf(out, "allowed %d, denied %d, failed %d\n", t.allowed.Load(), t.denied.Load(), t.failed.Load())
	if err := t.failure(); err != nil {
		fmt.Fprintf(out, "first failure: %v\n", err)
	}
	fmt.Fprintf(out, "latency p50 %s, p90 %s, p99 %s, max %s\n", pct(0.5), pct(0.9), pct(0.99), pct(1))
}

// isTerminal reports whether w is a terminal (a character device such as a
// tty), where a progress bar may redraw its line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
