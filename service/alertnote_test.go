package service

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// TestAlertNoteRoundTrip: a watched budget comes back from its note as it
// was, and every note cut short, lengthened or of another format is
// refused rather than read as another budget.
func TestAlertNoteRoundTrip(t *testing.T) {
	for _, w := range []watchedBudget{
		{key: "{team=acme}|usd-monthly|team=acme|2026-12", limit: tokenlimit.Limit{Algorithm: tokenlimit.FixedWindow, Quota: 50_000_000, Period: 31 * 24 * time.Hour, Offset: 7 * time.Hour},
			name: "usd-monthly", unit: USD, level: LevelTeam, levelName: "acme", alertAt: []int{80, 95}},
		{key: "tokens|user=u", store: "home", limit: tokenlimit.TokenBucketLimit(1000, 10, time.Second), name: "tokens", unit: Tokens, level: LevelPlan, alertAt: []int{1, 100}},
		{key: strings.Repeat("k", tokenlimit.MaxKeyLength), limit: tokenlimit.GCRALimit(5, 1, time.Minute), name: "n", level: LevelKey, levelName: "laptop", alertAt: []int{50}},
	} {
		note := w.note()
		if len(note) > tokenlimit.MaxNoteLength {
			t.Errorf("%s: a note of %d bytes, over tokenlimit.MaxNoteLength", w.name, len(note))
		}
		got, err := watchedFromNote(note)
		if err != nil || !reflect.DeepEqual(got, w) {
			t.Errorf("%s: %+v, %v; want %+v", w.name, got, err, w)
		}
		for cut := range len(note) {
			if _, err := watchedFromNote(note[:cut]); err == nil {
				t.Errorf("%s: the note cut to %d of %d bytes was read", w.name, cut, len(note))
			}
		}
		if _, err := watchedFromNote(note + "x"); err == nil {
			t.Errorf("%s: the note with a byte more was read", w.name)
		}
		if _, err := watchedFromNote("\x02" + note[1:]); err == nil {
			t.Errorf("%s: a note of format 2 was read", w.name)
		}
	}
}
