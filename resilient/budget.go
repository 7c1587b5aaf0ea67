package resilient

import "time"

// This file names the states a fail-open budget goes through around an
// outage, and holds their one table of transitions.
//
//   - Remote: the store decides the budget alone.
//   - Local: the local budget answered for it (the store failed), and the
//     store has not answered for it since. While the store fails, requests
//     are decided on the local budget; once it answers again, they keep to
//     the local budget as well (held there first), and the store is asked
//     to peek at the budget when the local budget denies, so that its answer
//     starts the recovery.
//   - Recovering: the store answered for the budget again; for the recovery
//     period a request is admitted only if the local budget admits it too,
//     so that a replica back first is not granted what other replicas
//     admitted locally and have not written back yet.
//
// A budget leaves Local and Recovering for Remote when its recovery ends:
// the recovery period after the store answered again, or once the local
// budget would be whole again (what it admitted has refilled), whichever
// comes first. What was admitted locally is written back to the store in
// the call that follows, whatever the state (Failover.writeBack).

// State is a fail-open budget's state.
type State uint8

// The states.
const (
	Remote State = iota
	Local
	Recovering
)

// String returns "remote", "local" or "recovering".
func (s State) String() string {
	return [...]string{"remote", "local", "recovering"}[s]
}

// Event is what happens to a budget.
type Event uint8

// The events.
const (
	// LocalAnswered: the local budget answered for the budget (the store
	// failed); at is the time of its answer, whole when the local budget
	// would be whole again.
	LocalAnswered Event = iota
	// StoreAnswered: the store answered for the budget at at (a check, a
	// peek or a write-back).
	StoreAnswered
	// Asked: a request asks whether the budget must keep to its local
	// budget at at.
	Asked
)

// String names the event.
func (e Event) String() string {
	return [...]string{"local answered", "store answered", "asked"}[e]
}

// Budget is one fail-open budget's state, with the times its transitions
// depend on. The zero value is Remote. A budget back in Remote keeps its
// times: a new outage only moves LocalWhole later.
type Budget struct {
	State State
	// StoreBack is when the store first answered after the local budget
	// did (Recovering), zero otherwise; LocalWhole is when the local budget
	// would be whole again.
	StoreBack, LocalWhole time.Time
}

// transition is one row of the table: in state from, event on leads to
// state to, and the request keeps to its local budget (hold) or not. ended
// rows apply when the recovery is over at the event's time.
type transition struct {
	from  State
	on    Event
	ended bool
	to    State
	hold  bool
}

// transitions is the table. A (from, on, ended) not in it does not occur.
var transitions = [...]transition{
	{Remote, LocalAnswered, false, Local, false},
	{Local, LocalAnswered, false, Local, false},
	{Recovering, LocalAnswered, false, Local, false},
	{Remote, StoreAnswered, false, Remote, false},
	{Local, StoreAnswered, false, Recovering, false},
	{Recovering, StoreAnswered, false, Recovering, false},
	{Remote, Asked, false, Remote, false},
	{Local, Asked, false, Local, true},
	{Recovering, Asked, false, Recovering, true},
	{Local, Asked, true, Remote, false},
	{Recovering, Asked, true, Remote, false},
}

// On returns b after event e at time at (for LocalAnswered, whole is when
// the local budget would be whole again), for a recovery period of
// recovery, and whether the request that asked (Asked) must keep to the
// local budget as well as the store's.
func (b Budget) On(e Event, at, whole time.Time, recovery time.Duration) (Budget, bool) {
	ended := e == Asked && b.State != Remote && !at.Before(b.RecoveryEnd(recovery))
	for _, t := range transitions {
		if t.from == b.State && t.on == e && t.ended == ended {
			return b.enter(t.to, e, at, whole), t.hold
		}
	}
	return b, false
}

// enter returns b in state to after event e at at.
func (b Budget) enter(to State, e Event, at, whole time.Time) Budget {
	switch {
	case e == LocalAnswered:
		b.StoreBack = time.Time{}
		if whole.After(b.LocalWhole) {
			b.LocalWhole = whole
		}
	case e == StoreAnswered && b.State == Local:
		b.StoreBack = at
	}
	b.State = to
	return b
}

// RecoveryEnd is when b's recovery ends, for a recovery period of d: d
// after the store answered again, or when the local budget would be whole
// again if that is earlier (and while the store has not answered yet).
func (b Budget) RecoveryEnd(d time.Duration) time.Time {
	if b.State == Recovering {
		if end := b.StoreBack.Add(d); end.Before(b.LocalWhole) {
			return end
		}
	}
	return b.LocalWhole
}
