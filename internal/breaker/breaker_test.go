package breaker

import (
	"errors"
	"testing"
	"time"
)

func TestBreakerOpensAfterThresholdAndRecoversThroughOneTrial(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var changes []State
	b := New(3, time.Second, func() time.Time { return now }, func(s State) { changes = append(changes, s) })
	fail := errors.New("redis down")

	for i := range 3 {
		if !b.Allow() {
			t.Fatalf("call %d refused while closed", i)
		}
		b.Done(fail)
	}
	if b.State() != Open || b.Allow() {
		t.Fatalf("after 3 failures: state %s, want open and refusing", b.State())
	}
	now = now.Add(999 * time.Millisecond)
	if b.Allow() {
		t.Fatal("allowed a call before the cooldown ended")
	}
	now = now.Add(time.Millisecond)
	if !b.Allow() {
		t.Fatal("refused the half-open trial after the cooldown")
	}
	if b.Allow() {
		t.Fatal("allowed a second call while the trial is in flight")
	}
	b.Done(fail) // the trial fails: open again for a full cooldown
	if b.State() != Open {
		t.Fatalf("after a failed trial: %s, want open", b.State())
	}
	now = now.Add(time.Second)
	if !b.Allow() {
		t.Fatal("refused the second trial")
	}
	b.Done(nil)
	if b.State() != Closed || !b.Allow() {
		t.Fatalf("after a good trial: %s, want closed", b.State())
	}
	b.Done(nil)
	want := []State{Open, HalfOpen, Open, HalfOpen, Closed}
	if len(changes) != len(want) {
		t.Fatalf("state changes %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("state changes %v, want %v", changes, want)
		}
	}
}

func TestBreakerSuccessResetsTheFailureCount(t *testing.T) {
	t.Parallel()
	b := New(2, time.Second, time.Now, nil)
	for _, err := range []error{errors.New("x"), nil, errors.New("x")} {
		b.Allow()
		b.Done(err)
	}
	if b.State() != Closed {
		t.Fatalf("failures separated by a success opened the breaker: %s", b.State())
	}
	if got := []string{Closed.String(), HalfOpen.String(), Open.String()}; got[0] != "closed" || got[1] != "half-open" || got[2] != "open" {
		t.Fatalf("names %v", got)
	}
}
