package breaker

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var errDown = errors.New("redis down")

func TestBreakerOpensAfterThresholdAndRecoversThroughOneTrial(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := New(3, time.Second, func() time.Time { return now })
	for i := range 3 {
		tk, ok := b.Allow()
		if !ok {
			t.Fatalf("call %d refused while closed", i)
		}
		b.Done(tk, errDown)
	}
	if _, ok := b.Allow(); b.State() != Open || ok {
		t.Fatalf("after 3 failures: state %s, want open and refusing", b.State())
	}
	now = now.Add(999 * time.Millisecond)
	if _, ok := b.Allow(); ok || b.Ready() {
		t.Fatalf("before the cooldown ended: allowed %v, ready %v; want neither", ok, b.Ready())
	}
	now = now.Add(time.Millisecond)
	if !b.Ready() || b.State() != Open {
		t.Fatalf("cooldown over: ready %v in state %s, want ready and still open (Ready changes nothing)", b.Ready(), b.State())
	}
	trial, ok := b.Allow()
	if !ok || b.State() != HalfOpen {
		t.Fatalf("after the cooldown: allowed %v in state %s, want the half-open trial", ok, b.State())
	}
	if _, ok := b.Allow(); ok || b.Ready() {
		t.Fatalf("while the trial is in flight: allowed %v, ready %v; want neither", ok, b.Ready())
	}
	b.Done(trial, errDown) // the trial fails: open again for a full cooldown
	if b.State() != Open {
		t.Fatalf("after a failed trial: %s, want open", b.State())
	}
	now = now.Add(time.Second)
	trial, ok = b.Allow()
	if !ok {
		t.Fatal("refused the second trial")
	}
	b.Done(trial, nil)
	if _, ok := b.Allow(); b.State() != Closed || !ok || !b.Ready() {
		t.Fatalf("after a good trial: %s, want closed", b.State())
	}
}

func TestBreakerSuccessResetsTheFailureCount(t *testing.T) {
	t.Parallel()
	b := New(2, time.Second, time.Now)
	for _, err := range []error{errDown, nil, errDown} {
		tk, _ := b.Allow()
		b.Done(tk, err)
	}
	if b.State() != Closed {
		t.Fatalf("failures separated by a success opened the breaker: %s", b.State())
	}
	if got := []string{Closed.String(), HalfOpen.String(), Open.String()}; got[0] != "closed" || got[1] != "half-open" || got[2] != "open" {
		t.Fatalf("names %v", got)
	}
}

// A call that began before the breaker opened and succeeds late must not
// close it: only the half-open trial may.
func TestBreakerIgnoresStaleOutcomes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := New(1, time.Second, func() time.Time { return now })
	slow, _ := b.Allow()
	failing, _ := b.Allow()
	b.Done(failing, errDown)
	if b.State() != Open {
		t.Fatalf("after a failure at threshold 1: %s, want open", b.State())
	}
	b.Done(slow, nil) // late success of a call from before
	if b.State() != Open {
		t.Fatalf("a stale success closed the breaker: %s", b.State())
	}
	now = now.Add(time.Second)
	trial, _ := b.Allow()
	b.Cancel(slow) // stale: must not free the trial's place
	if _, ok := b.Allow(); ok {
		t.Fatal("a stale Cancel let a second trial through")
	}
	b.Cancel(trial)
	if _, ok := b.Allow(); !ok {
		t.Fatal("a cancelled trial did not free its place")
	}
}

// OnChange hears each transition exactly once, however many calls see the
// state: a burst of refused calls while open reports nothing more.
func TestBreakerReportsEachTransitionOnce(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := New(2, time.Second, func() time.Time { return now })
	var got []string
	b.OnChange(func(from, to State, failures int) {
		got = append(got, from.String()+"->"+to.String()+":"+string(rune('0'+failures)))
	})
	for range 2 {
		tk, _ := b.Allow()
		b.Done(tk, errDown)
	}
	for range 100 {
		b.Allow() // refused while open
	}
	now = now.Add(time.Second)
	trial, _ := b.Allow()
	for range 100 {
		b.Allow() // refused while the trial is in flight
	}
	b.Done(trial, nil)
	for range 100 {
		tk, _ := b.Allow()
		b.Done(tk, nil)
	}
	want := []string{"closed->open:2", "open->half-open:2", "half-open->closed:0"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}
