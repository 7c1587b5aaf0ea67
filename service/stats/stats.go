// Package stats keeps the live counts the dashboard shows: decisions per
// limit and result, and the decision latency, for each of the last Seconds
// seconds, and the configuration reloads. The service feeds them from its
// decision path (service.Service.Stats).
package stats

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Seconds is how far back Stats remembers: five minutes, one slot per
// second.
const Seconds = 300

// Result is what one limit answered in a decision, as Stats counts it: an
// index in Results.
type Result uint8

// The results, in the order of Results and of Series.Counts.
const (
	Allowed Result = iota
	Denied
	ShadowAllowed
	ShadowDenied
	FailOpenAllowed
	FailOpenDenied
	FailClosed
	KeySpaceFull
)

// Results names the results Stats counts, indexed by Result. They are the
// values of the result label of the tokenlimit_decisions_total metric.
var Results = [...]string{
	Allowed: "allowed", Denied: "denied", ShadowAllowed: "shadow_allowed", ShadowDenied: "shadow_denied",
	FailOpenAllowed: "fail_open_allowed", FailOpenDenied: "fail_open_denied", FailClosed: "fail_closed", KeySpaceFull: "key_space_full",
}

// String is r's name in Results.
func (r Result) String() string { return Results[r] }

const nResults = len(Results)

// statsMaxLimits bounds the limits Stats tracks. Limit names come from the
// configuration, so only a long run of reloads renaming limits could reach
// it; past it, new names are not counted.
const statsMaxLimits = 1024

// Stats counts decisions per limit and result, and the decision latency,
// for each of the last Seconds seconds, for the dashboard's live overview.
// The zero value is ready to use; it is safe for concurrent use.
//
// It is fed from the decision path, so Count and Time are cheap: per limit
// in the decision, one lookup in a read-only map and one atomic add on the counter
// of the decision's second (a slot is cleared, under a lock, only by the
// first decision of a new second), and two atomic adds for the latency.
// Nothing allocates once a limit has been seen. Seconds are those of the
// decision's time, so a fake clock drives Stats in tests.
type Stats struct {
	rows    atomic.Pointer[map[string]*statsRow]
	mu      sync.Mutex // serializes adding rows
	latency latencyRing

	reloadsOK, reloadsFailed atomic.Int64
	lastReload               atomic.Pointer[Reload]
}

// statsRow is one limit's ring: slot i holds the counts of the second s
// with s mod Seconds == i, and s in its sec field.
type statsRow struct {
	mu    sync.Mutex // serializes clearing slots
	slots [Seconds]countSlot
}

type countSlot struct {
	sec atomic.Int64
	n   [nResults]atomic.Int64
}

type latencyRing struct {
	mu    sync.Mutex
	slots [Seconds]latencySlot
}

type latencySlot struct {
	sec          atomic.Int64
	count, nanos atomic.Int64
}

// Count counts one decision of the limit named limit, with result r, made
// at at (service.Decision.At: the decision's time, not the clock's). The service
// calls it for each limit of every decision it reports in its metrics.
func (st *Stats) Count(at time.Time, limit string, r Result) {
	if row := st.row(limit); row != nil {
		row.add(at.Unix(), r)
	}
}

// Time records that a decision made at at took took to decide; it ignores
// took <= 0 (not timed, as for reservations).
func (st *Stats) Time(at time.Time, took time.Duration) {
	if took > 0 {
		st.latency.add(at.Unix(), took)
	}
}

// row returns name's row, adding it if it is new and there is room.
func (st *Stats) row(name string) *statsRow {
	if m := st.rows.Load(); m != nil {
		if r, ok := (*m)[name]; ok {
			return r
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	old := st.rows.Load()
	if old != nil {
		if r, ok := (*old)[name]; ok {
			return r
		}
		if len(*old) >= statsMaxLimits {
			return nil
		}
	}
	m := map[string]*statsRow{}
	if old != nil {
		m = maps.Clone(*old)
	}
	r := &statsRow{}
	m[name] = r
	st.rows.Store(&m)
	return r
}

func slotIndex(sec int64) int {
	return int((sec%Seconds + Seconds) % Seconds)
}

func (r *statsRow) add(sec int64, result Result) {
	s := &r.slots[slotIndex(sec)]
	if cur := s.sec.Load(); cur != sec {
		if cur > sec { // a straggler from Seconds ago: drop it
			return
		}
		r.mu.Lock()
		if s.sec.Load() < sec {
			for i := range s.n {
				s.n[i].Store(0)
			}
			s.sec.Store(sec)
		}
		r.mu.Unlock()
	}
	s.n[result].Add(1)
}

func (l *latencyRing) add(sec int64, took time.Duration) {
	s := &l.slots[slotIndex(sec)]
	if cur := s.sec.Load(); cur != sec {
		if cur > sec {
			return
		}
		l.mu.Lock()
		if s.sec.Load() < sec {
			s.count.Store(0)
			s.nanos.Store(0)
			s.sec.Store(sec)
		}
		l.mu.Unlock()
	}
	s.count.Add(1)
	s.nanos.Add(int64(took))
}

// Window is what Stats counted in a run of whole seconds. Element i of
// every series is the second From+i (Unix time); the last one is the second
// in progress, so it is still growing.
type Window struct {
	From int64
	// Limits has one entry per limit that decided anything in the window,
	// sorted by name.
	Limits []Series
	// Checks counts the timed decisions (checks, not reservations) of each
	// second, and LatencyMicros their mean latency in microseconds.
	Checks        []int64
	LatencyMicros []int64
}

// Series is one limit's counts: Counts[r][i] decisions with result
// Results[r] in second From+i.
type Series struct {
	Name   string
	Counts [nResults][]int64
}

// Window returns the counts of the seconds seconds that end with now's
// (1 <= seconds <= Seconds; other values are clamped). A decision
// being recorded concurrently may be missed or, rarely, counted in a
// neighbouring read.
func (st *Stats) Window(now time.Time, seconds int) Window {
	seconds = min(max(seconds, 1), Seconds)
	end := now.Unix()
	w := Window{From: end - int64(seconds) + 1}
	if m := st.rows.Load(); m != nil {
		for name, r := range *m {
			if ls, seen := r.series(name, w.From, seconds); seen {
				w.Limits = append(w.Limits, ls)
			}
		}
	}
	slices.SortFunc(w.Limits, func(a, b Series) int { return strings.Compare(a.Name, b.Name) })
	w.Checks, w.LatencyMicros = st.latency.series(w.From, seconds)
	return w
}

func (r *statsRow) series(name string, from int64, seconds int) (Series, bool) {
	ls := Series{Name: name}
	for k := range ls.Counts {
		ls.Counts[k] = make([]int64, seconds)
	}
	seen := false
	for i := range seconds {
		sec := from + int64(i)
		s := &r.slots[slotIndex(sec)]
		if s.sec.Load() != sec {
			continue
		}
		for k := range s.n {
			if v := s.n[k].Load(); v != 0 {
				ls.Counts[k][i], seen = v, true
			}
		}
	}
	return ls, seen
}

func (l *latencyRing) series(from int64, seconds int) (checks, micros []int64) {
	checks, micros = make([]int64, seconds), make([]int64, seconds)
	for i := range seconds {
		sec := from + int64(i)
		s := &l.slots[slotIndex(sec)]
		if s.sec.Load() != sec {
			continue
		}
		if n := s.count.Load(); n > 0 {
			checks[i], micros[i] = n, s.nanos.Load()/n/1000
		}
	}
	return checks, micros
}

// Reload is the outcome of a configuration reload.
type Reload struct {
	At time.Time
	// Version is the configuration version in force after the reload: the
	// new one, or the old one kept when the reload failed.
	Version int64
	// Err is why the new configuration was rejected; "" when it loaded.
	Err string
}

// RecordReload records a configuration reload that ended at at with the
// given version in force, and err (nil when the new configuration loaded).
func (st *Stats) RecordReload(at time.Time, version int64, err error) {
	r := &Reload{At: at, Version: version}
	if err != nil {
		r.Err = err.Error()
		st.reloadsFailed.Add(1)
	} else {
		st.reloadsOK.Add(1)
	}
	st.lastReload.Store(r)
}

// Reloads returns how many reloads succeeded and failed, and the last one
// (ok false if there was none).
func (st *Stats) Reloads() (succeeded, failed int64, last Reload, ok bool) {
	if r := st.lastReload.Load(); r != nil {
		last, ok = *r, true
	}
	return st.reloadsOK.Load(), st.reloadsFailed.Load(), last, ok
}
