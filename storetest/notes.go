package storetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// runNotes: the notes a reservation's items carry come back, each with
// the result its reserve answered, to the settlement that applies it, made
// by another client; never to one that applies nothing; a retry with other
// notes replays; bad notes are refused naming the field.
func runNotes(t *testing.T, open Open) {
	env := open(t)
	newLimiter := func() *tokenlimit.Limiter {
		lim, err := tokenlimit.NewLimiter(env.Replica(), tokenlimit.WithClock(func() time.Time { return Base }), tokenlimit.WithReservationTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	reserver, settler := newLimiter(), newLimiter()
	ctx := context.Background()
	// Every byte value, at a length that is no multiple of 6.
	long := make([]byte, tokenlimit.MaxNoteLength)
	for i := range long {
		long[i] = byte(i * 7)
	}
	items := []tokenlimit.Item{
		{Key: "noted-a", Limit: tb10at2, Cost: 3},
		{Key: "plain", Limit: tokenlimit.FixedWindowLimit(100, time.Minute), Cost: 5},
		{Key: "noted-b", Limit: tokenlimit.SlidingCounterLimit(50, time.Minute), Cost: 7},
		{Key: "noted-c", Limit: tokenlimit.GCRALimit(9, 1, time.Second), Cost: 1},
	}
	notes := []string{"a", "", string(long), "seven b"}
	res, err := reserver.ReserveWith(ctx, tokenlimit.ReserveRequest{ID: "notes", Items: items, Notes: notes})
	if errors.Is(err, tokenlimit.ErrUnsupported) {
		return // a store without reservations: the reservation cases say so
	}
	if err != nil || res.Status() != tokenlimit.Reserved {
		t.Fatalf("reserve: %v, %v; want reserved", res.Status(), err)
	}
	reserved := res.Decision().Results
	retry, err := reserver.ReserveWith(ctx, tokenlimit.ReserveRequest{ID: "notes", Items: items, Notes: []string{"other", "", "", ""}})
	if err != nil || retry.Status() != tokenlimit.Replayed {
		t.Fatalf("a retry with other notes: %v, %v; want replayed (notes are no part of the request)", retry.Status(), err)
	}

	got := []tokenlimit.Noted{{Note: "left over"}}
	st, err := settler.Settle(ctx, tokenlimit.SettleRequest{ID: "notes", Actual: 1, Noted: &got})
	if err != nil || st != tokenlimit.Settled {
		t.Fatalf("settle: %v, %v; want settled", st, err)
	}
	var want []tokenlimit.Noted
	for i, n := range notes {
		if n != "" {
			want = append(want, tokenlimit.Noted{Note: n, Result: reserved[i]})
		}
	}
	byNote := func(a, b tokenlimit.Noted) int { return strings.Compare(a.Note, b.Note) }
	slices.SortFunc(got, byNote)
	slices.SortFunc(want, byNote)
	if !slices.Equal(got, want) {
		t.Errorf("noted items of the settlement:\n%s\nwant (the first notes, the reserve's results):\n%s", showNoted(got), showNoted(want))
	}

	for _, c := range []struct {
		name string
		req  tokenlimit.SettleRequest
		want tokenlimit.SettleStatus
	}{
		{"settled again", tokenlimit.SettleRequest{ID: "notes", Actual: 2}, tokenlimit.AlreadySettled},
		{"never reserved", tokenlimit.SettleRequest{ID: "no-notes-here", Actual: 2}, tokenlimit.UnknownReservation},
	} {
		got := []tokenlimit.Noted{{Note: "left over"}}
		c.req.Noted = &got
		if st, err := settler.Settle(ctx, c.req); err != nil || st != c.want || len(got) != 0 {
			t.Errorf("%s: %v, %v, noted %s; want %v and none noted", c.name, st, err, showNoted(got), c.want)
		}
	}
	plain, err := reserver.ReserveWith(ctx, tokenlimit.ReserveRequest{ID: "no-notes", Items: items})
	if err != nil || plain.Status() != tokenlimit.Reserved {
		t.Fatalf("reserve without notes: %v, %v", plain.Status(), err)
	}
	got = []tokenlimit.Noted{{Note: "left over"}}
	if st, err := settler.Settle(ctx, tokenlimit.SettleRequest{ID: "no-notes", Actual: 1, Noted: &got}); err != nil || st != tokenlimit.Settled || len(got) != 0 {
		t.Errorf("settling a reservation without notes: %v, %v, noted %s; want settled, none noted", st, err, showNoted(got))
	}

	for _, b := range []struct {
		name, field string
		notes       []string
	}{
		{"a note per item or none", "notes", []string{"a"}},
		{"an over-long note", "notes[3]", []string{"", "", "", string(long) + "x"}},
	} {
		_, err := reserver.ReserveWith(ctx, tokenlimit.ReserveRequest{ID: "bad-notes", Items: items, Notes: b.notes})
		var fe *tokenlimit.FieldError
		if !errors.Is(err, tokenlimit.ErrInvalid) || !errors.As(err, &fe) || fe.Field != b.field {
			t.Errorf("%s: %v, want a *FieldError for %s", b.name, err, b.field)
		}
	}
}

func showNoted(noted []tokenlimit.Noted) string {
	var sb strings.Builder
	for _, n := range noted {
		note := n.Note
		if len(note) > 12 {
			note = note[:12] + "…"
		}
		sb.WriteString("  " + strings.ToValidUTF8(note, "?") + ": " + show(n.Result) + "\n")
	}
	return sb.String()
}
