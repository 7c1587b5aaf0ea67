package alert

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// SignatureHeader carries a webhook body's signature: "sha256=" and the
// hex HMAC-SHA256 of the body under the secret.
const SignatureHeader = "X-Tokenlimit-Signature"

// Sign returns the SignatureHeader value of body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Options configures a Notifier. Zero values take the defaults on each
// field.
type Options struct {
	// Webhook, if not empty, receives every event as a JSON POST signed
	// with Secret.
	Webhook string
	Secret  []byte
	// Client sends the webhook's requests; one with a 10s timeout when nil.
	Client *http.Client
	// Attempts is how many times an event is sent before it is dropped
	// (logged at error); 8 when 0. Backoff is the wait after the first
	// failure, doubled after each (1s when 0): 8 attempts span about 2 min.
	Attempts int
	Backoff  time.Duration
	// Queue bounds the events waiting for the webhook; past it an event is
	// dropped (logged at error); 1,000 when 0.
	Queue int
	// Logger receives a line per event and per delivery failure;
	// slog.Default() when nil.
	Logger *slog.Logger
	// Counted, if not nil, is called once per event (the
	// tokenlimit_alerts_total counter).
	Counted func(Event)
}

// Notifier delivers events: a log line, Options.Counted, and the webhook,
// at least once (retried with backoff; a receiver drops repeats by the
// event id). It is safe for concurrent use. Close stops it.
type Notifier struct {
	opts  Options
	queue chan Event
	// ctx ends at Close: it stops the deliveries and their requests.
	ctx  context.Context
	stop context.CancelFunc
	done sync.WaitGroup
}

// NewNotifier returns a running Notifier.
func NewNotifier(opts Options) *Notifier {
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.Attempts == 0 {
		opts.Attempts = 8
	}
	if opts.Backoff == 0 {
		opts.Backoff = time.Second
	}
	if opts.Queue == 0 {
		opts.Queue = 1000
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	n := &Notifier{opts: opts, queue: make(chan Event, opts.Queue)}
	n.ctx, n.stop = context.WithCancel(context.Background())
	if opts.Webhook != "" {
		n.done.Add(1)
		go n.deliver()
	}
	return n
}

// Notify delivers e: logs it, counts it, and queues it for the webhook.
func (n *Notifier) Notify(e Event) {
	n.opts.Logger.Info("budget threshold crossed", "limit", e.Limit, "level", e.Level, "threshold", e.Threshold,
		"used", e.Used, "limit_value", e.LimitValue, "period_end", e.PeriodEnd, "event_id", e.ID)
	if n.opts.Counted != nil {
		n.opts.Counted(e)
	}
	if n.opts.Webhook == "" {
		return
	}
	select {
	case n.queue <- e:
	default:
		n.opts.Logger.Error("alert webhook queue full: event dropped", "event_id", e.ID, "limit", e.Limit)
	}
}

// Close stops delivering; events still queued or being retried are
// dropped (their ids are logged).
func (n *Notifier) Close() {
	n.stop()
	n.done.Wait()
}

// deliver sends queued events one at a time, in order.
func (n *Notifier) deliver() {
	defer n.done.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case e := <-n.queue:
			n.send(e)
		}
	}
}

// send posts e until the webhook answers 2xx, Options.Attempts times at
// most, waiting Backoff, then twice as long, between attempts.
func (n *Notifier) send(e Event) {
	body, err := json.Marshal(e)
	if err != nil {
		n.opts.Logger.Error("alert event cannot be encoded", "event_id", e.ID, "error", err)
		return
	}
	wait := n.opts.Backoff
	for attempt := 1; ; attempt++ {
		err := n.post(body, e.ID)
		if err == nil {
			return
		}
		if attempt == n.opts.Attempts {
			n.opts.Logger.Error("alert webhook failed: event dropped", "event_id", e.ID, "attempts", attempt, "error", err)
			return
		}
		n.opts.Logger.Warn("alert webhook failed: retrying", "event_id", e.ID, "attempt", attempt, "retry_in", wait, "error", err)
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// post sends one attempt of body.
func (n *Notifier) post(body []byte, id string) error {
	req, err := http.NewRequestWithContext(n.ctx, http.MethodPost, n.opts.Webhook, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(n.opts.Secret, body))
	req.Header.Set("X-Tokenlimit-Event-Id", id)
	resp, err := n.opts.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}
