package algo

import "sort"

// MaxLogEntries caps the entries of one sliding log (tokenlimit's
// MaxLogEntries): at most this many requests are admitted per window, so no
// operation walks an unbounded list.
const MaxLogEntries = 1_000

// LogEntry is one charge in a sliding log: when it was taken and how much.
// Refunds are entries with a negative cost at the time of the charge they
// refund, so that both leave the window together.
type LogEntry struct {
	At   int64
	Cost int64
}

// Log is a sliding log's state: its entries, oldest first, and the sum of
// their costs. The zero value is empty. A Log is not safe for concurrent use.
type Log struct {
	Entries []LogEntry
	Sum     int64
}

// Trim drops the entries that have left the window (at or before
// now-Length). It changes no decision, only memory.
func (w Window) Trim(l *Log, now int64) {
	horizon := now - w.Length
	n := sort.Search(len(l.Entries), func(i int) bool { return l.Entries[i].At > horizon })
	for _, e := range l.Entries[:n] {
		l.Sum -= e.Cost
	}
	l.Entries = l.Entries[:copy(l.Entries, l.Entries[n:])]
}

// Decide answers cost at now for a trimmed log (see Trim) without charging;
// charge an allowed cost > 0 with l.Add(now, cost). The window is the half-open
// interval (now-Length, now]: cost fits if the costs in it plus cost are at
// most Limit and the log has room for one more entry.
//
// Example: Window{Limit: 5, Length: 5e6} with five cost-1 entries at 0, 1, 2,
// 3 and 4 s denies cost 1 at 4.5 s with RetryAfter 0.5 s, when the entry at
// 0 s leaves.
func (w Window) Decide(l *Log, now, cost int64) Outcome {
	out := Outcome{Remaining: w.logRemaining(l), ResetAfter: w.logReset(l, now)}
	switch {
	case cost > w.Limit:
		out.TooLarge = true
	case cost == 0 || (l.Sum+cost <= w.Limit && len(l.Entries) < MaxLogEntries):
		out.Allowed = true
		if cost > 0 {
			out.Remaining = max(0, w.Limit-l.Sum-cost)
			if len(l.Entries)+1 >= MaxLogEntries {
				out.Remaining = 0
			}
			out.ResetAfter = max(out.ResetAfter, w.Length)
		}
	default:
		out.RetryAfter = w.logFitAt(l, cost) - now
	}
	return out
}

// LogAdjust applies delta to a sliding log charged at chargedAt: a refund is
// recorded at chargedAt while that charge is still in the window, so both
// leave together, and never exceeds what the log still holds at that time
// (a log lost to a restart refunds nothing); an extra charge is recorded at
// now. It returns how long to keep the log (0: delete it).
func (w Window) LogAdjust(l *Log, now, chargedAt, delta int64) int64 {
	w.Trim(l, now)
	switch {
	case delta > 0:
		l.Add(now, delta)
	case chargedAt > now-w.Length:
		if refund := min(-delta, l.heldAt(chargedAt)); refund > 0 {
			l.Add(chargedAt, -refund)
		}
	}
	if l.Sum == 0 {
		// Every charge left is cancelled by its refund, at the same time:
		// the entries can never matter again.
		*l = Log{Entries: l.Entries[:0]}
	}
	return w.logReset(l, now)
}

// Add records cost at time at, keeping the entries ordered by time.
func (l *Log) Add(at, cost int64) {
	i := sort.Search(len(l.Entries), func(i int) bool { return l.Entries[i].At > at })
	l.Entries = append(l.Entries, LogEntry{})
	copy(l.Entries[i+1:], l.Entries[i:])
	l.Entries[i] = LogEntry{At: at, Cost: cost}
	l.Sum += cost
}

// heldAt is the net cost the log holds at time at.
func (l *Log) heldAt(at int64) int64 {
	var held int64
	for i := sort.Search(len(l.Entries), func(i int) bool { return l.Entries[i].At >= at }); i < len(l.Entries) && l.Entries[i].At == at; i++ {
		held += l.Entries[i].Cost
	}
	return held
}

func (w Window) logRemaining(l *Log) int64 {
	if len(l.Entries) >= MaxLogEntries {
		return 0
	}
	return max(0, w.Limit-l.Sum)
}

// logReset is how long until the newest entry leaves the window.
func (w Window) logReset(l *Log, now int64) int64 {
	if len(l.Entries) == 0 {
		return 0
	}
	return l.Entries[len(l.Entries)-1].At + w.Length - now
}

// logFitAt returns when enough of the oldest entries have left for cost to
// fit. Entries with equal times leave together, so the check runs only at
// the end of each group. cost <= Limit, so the walk always ends.
func (w Window) logFitAt(l *Log, cost int64) int64 {
	sum, count := l.Sum, len(l.Entries)
	for i, e := range l.Entries {
		sum -= e.Cost
		count--
		lastOfGroup := i+1 == len(l.Entries) || l.Entries[i+1].At != e.At
		if lastOfGroup && sum+cost <= w.Limit && count < MaxLogEntries {
			return e.At + w.Length
		}
	}
	return l.Entries[len(l.Entries)-1].At + w.Length
}
