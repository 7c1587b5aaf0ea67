package resilient

import (
	"testing"
	"time"
)

// The budget's transitions at fixed instants: each row is a state, an
// event and its time, and the state that follows with whether the request
// keeps to its local budget. The recovery period is 10s; the local budget
// of the outage is whole again at t0+30s unless a row says otherwise.
func TestBudgetTransitions(t *testing.T) {
	t.Parallel()
	const recovery = 10 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	local := Budget{State: Local, LocalWhole: at(30)}
	recovering := Budget{State: Recovering, StoreBack: at(5), LocalWhole: at(30)}
	cases := []struct {
		name  string
		from  Budget
		event Event
		at    time.Time
		whole time.Time // LocalAnswered's
		want  Budget
		hold  bool
	}{
		{"remote: the store answers", Budget{}, StoreAnswered, at(1), time.Time{}, Budget{}, false},
		{"remote: a request asks", Budget{}, Asked, at(1), time.Time{}, Budget{}, false},
		{"remote: the store failed, the local budget answers", Budget{}, LocalAnswered, at(0), at(30), local, false},
		{"local: answers again, whole later", local, LocalAnswered, at(2), at(40), Budget{State: Local, LocalWhole: at(40)}, false},
		{"local: answers again, whole earlier keeps the later", local, LocalAnswered, at(2), at(20), local, false},
		{"local: a request asks before the local budget is whole", local, Asked, at(29), time.Time{}, local, true},
		{"local: a request asks once the local budget is whole", local, Asked, at(30), time.Time{}, Budget{State: Remote, LocalWhole: at(30)}, false},
		{"local: the store answers: recovery starts", local, StoreAnswered, at(5), time.Time{}, recovering, false},
		{"recovering: the store answers again, nothing moves", recovering, StoreAnswered, at(6), time.Time{}, recovering, false},
		{"recovering: a request asks within the period", recovering, Asked, at(14), time.Time{}, recovering, true},
		{"recovering: a request asks when the period ends", recovering, Asked, at(15), time.Time{}, Budget{State: Remote, StoreBack: at(5), LocalWhole: at(30)}, false},
		{"recovering: the local budget, whole first, ends it", Budget{State: Recovering, StoreBack: at(5), LocalWhole: at(8)}, Asked, at(8), time.Time{},
			Budget{State: Remote, StoreBack: at(5), LocalWhole: at(8)}, false},
		{"recovering: the store fails again", recovering, LocalAnswered, at(7), at(35), Budget{State: Local, LocalWhole: at(35)}, false},
		{"remote after an outage: a new one moves whole only later", Budget{State: Remote, StoreBack: at(5), LocalWhole: at(30)}, LocalAnswered, at(20), at(25),
			local, false},
	}
	for _, c := range cases {
		got, hold := c.from.On(c.event, c.at, c.whole, recovery)
		if got != c.want || hold != c.hold {
			t.Errorf("%s: %+v on %s at +%s = %+v, hold %v; want %+v, hold %v", c.name, c.from, c.event, c.at.Sub(t0), got, hold, c.want, c.hold)
		}
	}
}

// Every state and event has its row, once for a recovery that has not
// ended (and, for Asked in Local and Recovering, once for one that has).
func TestBudgetTableIsComplete(t *testing.T) {
	t.Parallel()
	seen := map[transition]int{}
	for _, tr := range transitions {
		tr.to, tr.hold = 0, false
		seen[tr]++
	}
	for _, s := range []State{Remote, Local, Recovering} {
		for _, e := range []Event{LocalAnswered, StoreAnswered, Asked} {
			endings := []bool{false}
			if e == Asked && s != Remote {
				endings = append(endings, true)
			}
			for _, ended := range endings {
				if n := seen[transition{from: s, on: e, ended: ended}]; n != 1 {
					t.Errorf("%s on %s (ended %v): %d rows, want 1", s, e, ended, n)
				}
			}
		}
	}
}
