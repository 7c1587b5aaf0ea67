package service

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/alert"
	"github.com/tokenlimit/tokenlimit/resilient"
)

// This file raises the warnings of limits with alert_at: a request whose
// charge crosses a threshold of a budget (one request does, as the store
// counts atomically) gets the threshold on its decision (Decision.Alerts,
// a warning header), and the event is claimed in the store, so that one
// replica alone notifies it per threshold, budget and window: the claim is
// a check of a budget of 1 per the limit's window, keyed by the budget's
// key and the threshold (the same Redis slot, a hash tag included). A
// budget that crosses a threshold again in the same window (a token bucket
// refilling, a refund) is not notified again. Only decisions the store
// made raise warnings: none while it fails.

// Alert is a threshold of a budget's use that a request crossed.
type Alert struct {
	// Limit is the limit's name, Percent the threshold (80 for 80%).
	Limit   string
	Percent int
}

// String writes a as a warning header's value: the limit's name and the
// threshold, such as `daily;threshold=80%`.
func (a Alert) String() string { return a.Limit + ";threshold=" + alert.FormatPercent(a.Percent) }

// AlertHeader is the header that carries a decision's Alerts, one value
// each (Alert.String), on the HTTP API's and the proxy's answers.
const AlertHeader = "X-Tokenlimit-Alert"

// raiseAlerts adds to d (the store's answer to checks, outcome i of
// check i) the thresholds its charges crossed, and claims and notifies
// their events.
func (s *Service) raiseAlerts(ctx context.Context, checks []check, d *Decision) {
	for i := range checks {
		c := &checks[i]
		if len(c.limit.AlertAt) == 0 {
			continue
		}
		o := &d.Limits[i]
		for _, p := range alert.Crossed(c.limit.AlertAt, o.Limit, o.Limit-o.Remaining, o.Cost) {
			d.Alerts = append(d.Alerts, Alert{Limit: o.Name, Percent: p})
			w := watchedOf(c)
			s.claimAlert(ctx, &w, o.Limit-o.Remaining, o.Limit, p, d.At)
		}
	}
}

// watchedBudget is a budget with alert_at: what claiming and notifying
// its events needs. A reservation keeps it as its item's note
// (tokenlimit.ReserveRequest.Notes, encoded by note) so that whichever
// replica settles the reservation, by id alone included, raises what the
// settlement crossed.
type watchedBudget struct {
	key       string
	store     string // the limit's store ("" for the main one)
	limit     tokenlimit.Limit
	name      string
	unit      Unit
	level     Level
	levelName string
	alertAt   []int
}

// watchedOf returns c's budget as watched.
func watchedOf(c *check) watchedBudget {
	return watchedBudget{key: c.item.Key, store: c.limit.Store, limit: c.item.Limit, name: c.limit.Name, unit: unitOf(c.limit),
		level: c.level, levelName: c.levelName, alertAt: c.limit.AlertAt}
}

// alertNotes returns the notes of a reservation of checks: its budgets
// with alert_at, encoded (watchedBudget.note); nil when it has none.
func alertNotes(checks []check) []string {
	var notes []string
	for i := range checks {
		if c := &checks[i]; len(c.limit.AlertAt) > 0 {
			if notes == nil {
				notes = make([]string, len(checks))
			}
			w := watchedOf(c)
			if note := w.note(); len(note) <= tokenlimit.MaxNoteLength { // a key at most MaxKeyLength long fits
				notes[i] = note
			}
		}
	}
	return notes
}

// alertsAfterSettle raises the thresholds crossed since a reservation
// charged the budgets noted (its items' notes, as the settlement that
// applied it found them): a settlement above the estimate moves a budget
// without answering what it left, so the budgets are peeked at (one store
// call, made only for a reservation with alert_at limits) and every
// threshold between what each had used after the reservation's charge and
// what it uses now is claimed. One that another request crossed meanwhile
// and claimed is not sent twice; one crossed by a settlement is sent now.
func (s *Service) alertsAfterSettle(ctx context.Context, noted []tokenlimit.Noted) {
	watched := make([]watchedBudget, 0, len(noted))
	before := make([]int64, 0, len(noted))
	for _, n := range noted {
		w, err := watchedFromNote(n.Note)
		if err != nil {
			s.log.Debug("a reservation's alert note cannot be read: its alerts are not raised on settling", "error", err)
			continue
		}
		watched, before = append(watched, w), append(before, n.Result.Limit-n.Result.Remaining)
	}
	if len(watched) == 0 {
		return
	}
	items := make([]tokenlimit.Item, len(watched))
	policies := make([]resilient.Policy, len(watched)) // closed: the store's answer or none
	for i, w := range watched {
		items[i], policies[i] = tokenlimit.Item{Key: w.key, Limit: w.limit}, resilient.Policy{Store: w.store}
	}
	results := make([]tokenlimit.Result, len(items))
	a, err := s.fault.Decide(ctx, items, policies, results)
	if err != nil || a.Source != resilient.FromStore || a.Full {
		return
	}
	for i := range watched {
		r := &results[i]
		used := r.Limit - r.Remaining
		for _, p := range alert.Crossed(watched[i].alertAt, r.Limit, used, used-before[i]) {
			s.claimAlert(ctx, &watched[i], used, r.Limit, p, a.At)
		}
	}
}

// claimAlert claims the event of threshold p of w's budget, crossed at at
// with used of limitValue used, and notifies it if this replica won the
// claim.
func (s *Service) claimAlert(ctx context.Context, w *watchedBudget, used, limitValue int64, p int, at time.Time) {
	claim := []tokenlimit.Item{{Key: w.key + "|alert=" + strconv.Itoa(p), Cost: 1, Limit: claimLimit(w.limit)}}
	results := make([]tokenlimit.Result, 1)
	a, err := s.fault.Decide(ctx, claim, []resilient.Policy{{Store: w.store}}, results)
	if err != nil || a.Source != resilient.FromStore || a.Full || !results[0].Allowed {
		return // another replica's, or the store could not say: none sent
	}
	end := a.At.Add(results[0].ResetAfter)
	level, kind := w.levelName, w.level.String()
	if w.level == LevelPlan {
		level, kind = "config", "config"
		if w.levelName != "" {
			level, kind = w.levelName, "plan"
		}
	}
	s.alerts.Notify(alert.Event{
		ID: alert.ID(w.key, p, end), Limit: w.name, Level: level, LevelKind: kind,
		Threshold: alert.FormatPercent(p), Used: used, LimitValue: limitValue,
		Unit: w.unit.String(), PeriodEnd: end, At: at,
	})
}

// noteFormat is the first byte of a watchedBudget's note: a note of
// another format (a replica of another version) is not read.
const noteFormat = 1

// note encodes w for a reservation's record: the format, then each field
// (strings as their length and bytes, numbers as varints).
func (w *watchedBudget) note() string {
	b := make([]byte, 0, 32+len(w.key)+len(w.store)+len(w.name)+len(w.levelName)+len(w.alertAt))
	b = append(b, noteFormat)
	b = appendNoteString(b, w.key)
	b = appendNoteString(b, w.store)
	b = binary.AppendUvarint(b, uint64(w.limit.Algorithm))
	for _, v := range [...]int64{w.limit.Quota, int64(w.limit.Period), w.limit.Burst, int64(w.limit.Offset)} {
		b = binary.AppendVarint(b, v)
	}
	b = appendNoteString(b, w.name)
	b = append(b, byte(w.unit), byte(w.level))
	b = appendNoteString(b, w.levelName)
	b = binary.AppendUvarint(b, uint64(len(w.alertAt)))
	for _, p := range w.alertAt {
		b = binary.AppendUvarint(b, uint64(p))
	}
	return string(b)
}

func appendNoteString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// watchedFromNote decodes a note written by watchedBudget.note.
func watchedFromNote(note string) (watchedBudget, error) {
	r := noteReader{b: []byte(note)}
	if len(r.b) == 0 || r.b[0] != noteFormat {
		return watchedBudget{}, errors.New("service: an alert note of an unknown format")
	}
	r.b = r.b[1:]
	var w watchedBudget
	w.key, w.store = r.string(), r.string()
	w.limit.Algorithm = tokenlimit.Algorithm(r.uvarint())
	w.limit.Quota, w.limit.Period, w.limit.Burst, w.limit.Offset = r.varint(), time.Duration(r.varint()), r.varint(), time.Duration(r.varint())
	w.name = r.string()
	w.unit, w.level = Unit(r.byte()), Level(r.byte())
	w.levelName = r.string()
	if n := r.uvarint(); n <= uint64(len(r.b)) {
		w.alertAt = make([]int, n)
		for i := range w.alertAt {
			w.alertAt[i] = int(r.uvarint())
		}
	} else {
		r.err = true
	}
	if r.err || len(r.b) != 0 {
		return watchedBudget{}, errors.New("service: a malformed alert note")
	}
	return w, nil
}

// noteReader reads a note's fields; err records a field cut short.
type noteReader struct {
	b   []byte
	err bool
}

func (r *noteReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err, r.b = true, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *noteReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err, r.b = true, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *noteReader) byte() byte {
	if len(r.b) == 0 {
		r.err = true
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *noteReader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err, r.b = true, nil
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// claimLimit is the budget of an alert's claim for a budget of limit l:
// one claim per window of l (a fixed window of the same period and
// offset; a bucket's refill time, aligned to the epoch).
func claimLimit(l tokenlimit.Limit) tokenlimit.Limit {
	c := tokenlimit.FixedWindowLimit(1, l.Window())
	if l.Algorithm == tokenlimit.FixedWindow {
		c.Period, c.Offset = l.Period, l.Offset
	}
	return c
}
