package alert_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/alert"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

func TestThresholdIsTheCeilingOfTheShare(t *testing.T) {
	for _, c := range []struct {
		limit   int64
		percent int
		want    int64
	}{
		{10, 80, 8}, {3, 80, 3}, {3, 34, 2}, {3, 33, 1}, {1, 1, 1}, {1, 100, 1}, {50_000_000, 95, 47_500_000},
		{1<<62 + 1, 100, 1<<62 + 1}, {1<<62 + 1, 50, 1<<61 + 1},
	} {
		if got := alert.Threshold(c.limit, c.percent); got != c.want {
			t.Errorf("Threshold(%d, %d%%) = %d, want %d", c.limit, c.percent, got, c.want)
		}
	}
}

func TestCrossedListsTheThresholdsOneChargePassed(t *testing.T) {
	at := []int{50, 80, 95}
	for _, c := range []struct {
		limit, used, cost int64
		want              []int
	}{
		{10, 4, 4, nil},            // 0 → 4: below 5
		{10, 5, 1, []int{50}},      // 4 → 5: reaches 50%
		{10, 6, 1, nil},            // 5 → 6: already past
		{10, 10, 4, []int{80, 95}}, // 6 → 10: two at once
		{20, 19, 0, nil},           // a peek crosses nothing
		{20, 19, 19, []int{50, 80, 95}},
	} {
		if got := alert.Crossed(at, c.limit, c.used, c.cost); !slices.Equal(got, c.want) {
			t.Errorf("Crossed(%d used of %d after %d) = %v, want %v", c.used, c.limit, c.cost, got, c.want)
		}
	}
}

// TestSignIsHMACSHA256 checks Sign against RFC 4231's test case 2.
func TestSignIsHMACSHA256(t *testing.T) {
	got := alert.Sign([]byte("Jefe"), []byte("what do ya want for nothing?"))
	if want := "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestIDIsTheSameForTheSameEventOnly(t *testing.T) {
	end := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	id := alert.ID("team:acme", 80, end)
	if len(id) != 32 || alert.ID("team:acme", 80, end) != id {
		t.Fatalf("id %q: want 32 hex digits, the same each time", id)
	}
	for _, other := range []string{alert.ID("team:acme", 95, end), alert.ID("team:acme2", 80, end), alert.ID("team:acme", 80, end.Add(time.Second))} {
		if other == id {
			t.Errorf("a different event has the same id %s", id)
		}
	}
}

// TestWebhookIsRetriedUntilItAnswers: a webhook that fails twice gets the
// event a third time, each attempt signed, with the same event id; the
// counter and the log see it once.
func TestWebhookIsRetriedUntilItAnswers(t *testing.T) {
	secret := []byte("s3cret")
	var mu sync.Mutex
	var bodies [][]byte
	var ids []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if got := r.Header.Get(alert.SignatureHeader); got != alert.Sign(secret, body) {
			t.Errorf("signature %q does not sign the body", got)
		}
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, body)
		ids = append(ids, r.Header.Get("X-Tokenlimit-Event-Id"))
		if len(bodies) < 3 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	counted := 0
	n := alert.NewNotifier(alert.Options{Webhook: srv.URL, Secret: secret, Backoff: time.Millisecond, Logger: testkit.Quiet(),
		Counted: func(alert.Event) { counted++ }})
	defer n.Close()
	ev := alert.Event{ID: "0123456789abcdef0123456789abcdef", Limit: "usd-monthly", Level: "acme", LevelKind: "team",
		Threshold: "80%", Used: 40_000_000, LimitValue: 50_000_000, Unit: "usd", PeriodEnd: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	n.Notify(ev)
	testkit.Eventually(t, 10*time.Second, "three attempts", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(bodies) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	var got map[string]any
	if err := json.Unmarshal(bodies[2], &got); err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]any{"event_id": ev.ID, "limit": "usd-monthly", "level": "acme", "threshold": "80%",
		"used": 4e7, "limit_value": 5e7, "period_end": "2027-01-01T00:00:00Z"} {
		if got[field] != want {
			t.Errorf("body's %s = %v, want %v", field, got[field], want)
		}
	}
	if !slices.Equal(ids, []string{ev.ID, ev.ID, ev.ID}) || counted != 1 {
		t.Errorf("ids %v, counted %d: want the event's id on each attempt, counted once", ids, counted)
	}
}
