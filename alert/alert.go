// Package alert carries the warnings a budget raises before it runs out:
// a limit's alert_at thresholds (config.Limit.AlertAt) crossed by a
// request. It decides which thresholds a charge crossed (Crossed) and
// delivers the events (Notifier): a log line, the caller's counter, and an
// optional webhook, signed and retried. Which replica sends an event is
// decided in the store (the service claims it there), so that replicas
// never both send one.
package alert

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// Event is one threshold of one budget crossed, in one window. Its JSON is
// the webhook's body.
type Event struct {
	// ID is the same for the same threshold of the same budget in the
	// same window, on every replica: a receiver drops repeats by it.
	ID string `json:"event_id"`
	// Limit is the limit's name.
	Limit string `json:"limit"`
	// Level is the name of the team or key whose limit it is (a plane
	// level), or the level's kind: "plan" for a plan's limit, "config" for
	// a limit of the file. LevelKind is "key", "team", "plan" or "config".
	Level     string `json:"level"`
	LevelKind string `json:"level_kind"`
	// Threshold is the percentage crossed, written "80%".
	Threshold string `json:"threshold"`
	// Used is what the budget had used after the request that crossed it,
	// of LimitValue, in Unit ("requests", "tokens", "usd": then both are
	// micro-dollars).
	Used       int64  `json:"used"`
	LimitValue int64  `json:"limit_value"`
	Unit       string `json:"unit,omitempty"`
	// PeriodEnd is when the budget's window ends (for a token bucket or
	// GCRA: when it would be full again).
	PeriodEnd time.Time `json:"period_end"`
	// At is when the request crossed it.
	At time.Time `json:"at"`
}

// Crossed returns the thresholds among percents (ascending) that a charge
// of cost crossed, leaving used of limit used: those at or below used
// that were above used - cost. A threshold is ceil(limit × percent / 100).
func Crossed(percents []int, limit, used, cost int64) []int {
	var out []int
	before := used - cost
	for _, p := range percents {
		t := Threshold(limit, p)
		if before < t && t <= used {
			out = append(out, p)
		}
	}
	return out
}

// Threshold is the use of a budget of limit at which percent is crossed:
// ceil(limit × percent / 100), exact for any limit below 2^63 / 100.
func Threshold(limit int64, percent int) int64 {
	p := int64(percent)
	q, r := limit/100, limit%100
	return q*p + (r*p+99)/100
}

// ID returns the event id of threshold percent of the budget key in the
// window ending at periodEnd: 32 hex digits of a SHA-256.
func ID(key string, percent int, periodEnd time.Time) string {
	h := sha256.New()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, int64(percent), 10))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, periodEnd.UnixMicro(), 10))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// FormatPercent writes percent as the events do: "80%".
func FormatPercent(percent int) string { return strconv.Itoa(percent) + "%" }
