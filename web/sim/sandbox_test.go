package sim

import (
	"testing"
	"time"
)

// Sessions are bounded: idle ones expire, and past MaxSessions the least
// recently used one goes.
func TestSandboxBounds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	sb := newSandbox(func() time.Time { return now }, time.Minute, 3)
	var ids []string
	for range 3 {
		s, err := sb.session("")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.id)
		now = now.Add(time.Second)
	}
	if s, _ := sb.session(ids[0]); s.id != ids[0] { // ids[0] is now the most recent
		t.Fatalf("session %q not found", ids[0])
	}
	s4, _ := sb.session("")
	if sb.len() != 3 {
		t.Errorf("%d sessions, want 3", sb.len())
	}
	if s, _ := sb.session(ids[1]); s.id == ids[1] {
		t.Error("the least recently used session was kept")
	}
	now = now.Add(time.Minute) // every session is idle now
	if s, _ := sb.session(s4.id); s.id == s4.id || sb.len() != 1 {
		t.Errorf("an idle session was kept (%d sessions)", sb.len())
	}
}
