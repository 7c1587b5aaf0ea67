package breaker

import (
	"errors"
	"fmt"
	"math/rand/v2"
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

// model is the breaker without its lock-free fast path: every call decides
// under the lock, as the breaker did before it had one.
type model struct {
	threshold, failures int
	cooldown            time.Duration
	now                 func() time.Time
	state               State
	gen                 Ticket
	openedAt            time.Time
	trial               bool
	changes             int
}

func (m *model) set(s State) {
	if s != m.state {
		m.state, m.gen = s, m.gen+1
		m.changes++
	}
}

func (m *model) allow() (Ticket, bool) {
	if m.state == Open && m.now().Sub(m.openedAt) >= m.cooldown {
		m.set(HalfOpen)
	}
	switch {
	case m.state == Closed:
		return m.gen, true
	case m.state == HalfOpen && !m.trial:
		m.trial = true
		return m.gen, true
	}
	return m.gen, false
}

func (m *model) ready() bool {
	switch m.state {
	case Closed:
		return true
	case Open:
		return m.now().Sub(m.openedAt) >= m.cooldown
	}
	return !m.trial
}

func (m *model) done(t Ticket, err error) {
	if t != m.gen {
		return
	}
	m.trial = false
	if err == nil {
		m.failures = 0
		m.set(Closed)
		return
	}
	m.failures++
	if m.state == HalfOpen || m.failures >= m.threshold {
		m.openedAt = m.now()
		m.set(Open)
	}
}

func (m *model) cancel(t Ticket) {
	if t == m.gen {
		m.trial = false
	}
}

// TestBreakerMatchesItsModel runs random calls on a breaker and on model,
// which decides every call under a lock: the fast path of a closed breaker
// with no failures answers as that would.
func TestBreakerMatchesItsModel(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	b := New(3, time.Second, clock)
	changes := 0
	b.OnChange(func(State, State, int) { changes++ })
	m := &model{threshold: 3, cooldown: time.Second, now: clock}
	r := rand.New(rand.NewPCG(1, 2))
	var tickets []Ticket
	seen := map[State]int{} // steps ended in each state
	pick := func() Ticket { // mostly the latest: older ones are mostly stale
		if r.IntN(3) > 0 {
			return tickets[len(tickets)-1]
		}
		return tickets[r.IntN(len(tickets))]
	}
	for step := range 20_000 {
		var got, want string
		switch op := r.IntN(6); op {
		case 0, 1:
			tk, ok := b.Allow()
			mtk, mok := m.allow()
			got, want = fmt.Sprint("allow ", tk, ok), fmt.Sprint("allow ", mtk, mok)
			if ok {
				tickets = append(tickets, tk)
			}
		case 2:
			if len(tickets) == 0 {
				continue
			}
			tk := pick()
			var err error
			if r.IntN(3) == 0 {
				err = errDown
			}
			b.Done(tk, err)
			m.done(tk, err)
		case 3:
			if len(tickets) == 0 {
				continue
			}
			tk := pick()
			b.Cancel(tk)
			m.cancel(tk)
		case 4:
			got, want = fmt.Sprint("ready ", b.Ready()), fmt.Sprint("ready ", m.ready())
		case 5:
			now = now.Add(time.Duration(r.IntN(600)) * time.Millisecond)
		}
		got += fmt.Sprint(" state ", b.State(), " changes ", changes)
		want += fmt.Sprint(" state ", m.state, " changes ", m.changes)
		seen[m.state]++
		if got != want {
			t.Fatalf("step %d: breaker %q, model %q", step, got, want)
		}
	}
	for _, st := range []State{Closed, HalfOpen, Open} {
		if seen[st] < 200 {
			t.Errorf("only %d of the steps ended %s: %v", seen[st], st, seen)
		}
	}
}
