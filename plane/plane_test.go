package plane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/config"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func openPlane(t *testing.T, s Store, now *time.Time) *Plane {
	t.Helper()
	p, err := Open(context.Background(), s, Options{
		Clock:     func() time.Time { return *now },
		KnownPlan: func(plan string) bool { return plan == "pro" || plan == "free" },
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSpecErrorsNameTheField(t *testing.T) {
	t.Parallel()
	now := t0
	p := openPlane(t, NewMemoryStore(), &now)
	ctx := context.Background()
	if _, err := p.CreateTeam(ctx, Spec{Name: "acme", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		spec  Spec
		field string
	}{
		{"negative limit", Spec{Name: "k", Limits: json.RawMessage(`[{"name":"a","algorithm":"token_bucket","capacity":-1,"refill":"1/s"}]`)}, "limits[0].capacity"},
		{"non-numeric limit", Spec{Name: "k", Limits: json.RawMessage(`[{"name":"a","algorithm":"fixed_window","limit":"lots/s"}]`)}, "limits[0].limit"},
		{"unknown limit field", Spec{Name: "k", Limits: json.RawMessage(`[{"name":"a","algorithm":"fixed_window","limit":"1/s","colour":2}]`)}, "limits[0].colour"},
		{"a key on a limit", Spec{Name: "k", Limits: json.RawMessage(`[{"name":"a","algorithm":"fixed_window","limit":"1/s","key":["user"]}]`)}, "limits[0].key"},
		{"a match on a limit", Spec{Name: "k", Limits: json.RawMessage(`[{"name":"a","algorithm":"fixed_window","limit":"1/s","match":{"route":"/x"}}]`)}, "limits[0].match"},
		{"unknown plan", Spec{Name: "k", Plan: "gold"}, "plan"},
		{"unknown team", Spec{Name: "k", Team: "nope"}, "team"},
		{"expiry in the past", Spec{Name: "k", ExpiresAt: "2026-12-01T11:59:59Z"}, "expires_at"},
		{"expiry not a time", Spec{Name: "k", ExpiresAt: "tomorrow"}, "expires_at"},
		{"label too long", Spec{Name: "k", Labels: map[string]string{"env": strings.Repeat("x", 257)}}, "labels.env"},
		{"no name", Spec{}, "name"},
	} {
		_, _, err := p.CreateKey(ctx, c.spec)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want a FieldError on %s", c.name, err, c.field)
		}
	}
	if keys, _ := p.ListKeys(Filter{}, "", 10); len(keys) != 0 {
		t.Errorf("invalid specs stored %d keys", len(keys))
	}
	if _, err := p.CreateTeam(ctx, Spec{Name: "Bad Name"}); err == nil {
		t.Error("a team named \"Bad Name\" was accepted")
	}
	if _, err := p.CreateTeam(ctx, Spec{Name: "acme"}); !errors.Is(err, ErrConflict) {
		t.Errorf("a second team acme: got %v, want ErrConflict", err)
	}
}

func TestSecretsAuthenticateAndAreNeverStored(t *testing.T) {
	t.Parallel()
	now := t0
	store := NewMemoryStore()
	p := openPlane(t, store, &now)
	ctx := context.Background()
	k, secret, err := p.CreateKey(ctx, Spec{Name: "laptop", Limits: json.RawMessage(`[{"name":"rpm","algorithm":"fixed_window","limit":"10/min"}]`)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, "tl-") || len(secret) != 3+64 {
		t.Fatalf("secret %q: want tl- and 64 hex digits", secret)
	}
	got, _, err := p.Authenticate(secret, now)
	if err != nil || got.ID != k.ID || len(got.Limits) != 1 {
		t.Fatalf("Authenticate: %v, %v", got, err)
	}
	if _, _, err := p.Authenticate(secret+"x", now); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("a wrong secret: got %v", err)
	}
	recs, _, _ := store.Load(ctx)
	for _, r := range recs {
		if bytes.Contains(r.Data, []byte(secret)) || bytes.Contains(r.Data, []byte(secret[3:])) {
			t.Fatalf("the store holds the secret: %s", r.Data)
		}
	}
	// Rotation: the old secret stays valid for its grace period only.
	_, fresh, err := p.RotateKey(ctx, k.ID, time.Minute, AnyVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{secret, fresh} {
		if _, _, err := p.Authenticate(s, now); err != nil {
			t.Errorf("within the grace period: %v", err)
		}
	}
	if _, _, err := p.Authenticate(secret, now.Add(time.Minute)); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("the old secret after its grace: got %v", err)
	}
	if err := p.DeleteKey(ctx, k.ID, AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Authenticate(fresh, now); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("a revoked key: got %v", err)
	}
}

func TestDisabledAndExpired(t *testing.T) {
	t.Parallel()
	now := t0
	p := openPlane(t, NewMemoryStore(), &now)
	ctx := context.Background()
	if _, err := p.CreateTeam(ctx, Spec{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	k, secret, err := p.CreateKey(ctx, Spec{Name: "k", Team: "acme", ExpiresAt: "2026-12-01T13:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Authenticate(secret, t0.Add(time.Hour)); !errors.Is(err, ErrKeyExpired) {
		t.Errorf("at its expiry: got %v", err)
	}
	if _, err := p.UpdateTeam(ctx, "acme", Spec{Disabled: true}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Authenticate(secret, t0); !errors.Is(err, ErrKeyDisabled) {
		t.Errorf("in a disabled team: got %v", err)
	}
	if err := p.DeleteTeam(ctx, "acme", AnyVersion); !errors.Is(err, ErrInUse) {
		t.Errorf("deleting a team with keys: got %v", err)
	}
	if _, err := p.UpdateKey(ctx, k.ID, Spec{Name: "k2", Team: "acme"}, k.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpdateKey(ctx, k.ID, Spec{Name: "k3"}, k.Version); !errors.Is(err, ErrConflict) {
		t.Errorf("an update with a stale version: got %v", err)
	}
}

func TestFileStoreReplaysAndDropsATornLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := t0
	s, err := OpenFileStore(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := openPlane(t, s, &now)
	ctx := context.Background()
	k, secret, err := p.CreateKey(ctx, Spec{Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	gone, _, _ := p.CreateKey(ctx, Spec{Name: "two"})
	if err := p.DeleteKey(ctx, gone.ID, AnyVersion); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// A crash in the middle of a write leaves a line without its end.
	f, _ := os.OpenFile(filepath.Join(dir, FileName), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":9,"kind":"key","id":"key_x","da`)
	f.Close()

	s2, err := OpenFileStore(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	p2 := openPlane(t, s2, &now)
	if got, _, err := p2.Authenticate(secret, now); err != nil || got.ID != k.ID {
		t.Fatalf("after reopening: %v, %v", got, err)
	}
	if _, ok := p2.Key(gone.ID); ok {
		t.Error("a deleted key came back")
	}
	k3, _, err := p2.CreateKey(ctx, Spec{Name: "three"})
	if err != nil || k3.Version != 4 {
		t.Fatalf("a write after the torn line: %v, version %d, want 4", err, k3.Version)
	}
}

func TestUnreadableRecordIsSkipped(t *testing.T) {
	t.Parallel()
	now := t0
	s := NewMemoryStore()
	ctx := context.Background()
	s.Put(ctx, KindKey, "key_bad", 0, []byte(`{"format":99,"name":"x"}`))
	s.Put(ctx, KindTeam, "t", 0, []byte(`not json`))
	p := openPlane(t, s, &now)
	if _, ok := p.Key("key_bad"); ok {
		t.Error("a record of a later format was loaded")
	}
	if _, ok := p.Team("t"); ok {
		t.Error("an unreadable record was loaded")
	}
}

// TestFullReloadKeepsKeysInForce: while every record is reloaded (a replica
// that fell behind), a live key is never refused.
func TestFullReloadKeepsKeysInForce(t *testing.T) {
	t.Parallel()
	now := t0
	store := NewMemoryStore()
	p := openPlane(t, store, &now)
	_, secret, err := p.CreateKey(context.Background(), Spec{Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	recs, _, _ := store.Load(context.Background())
	stop := make(chan struct{})
	refused := make(chan error, 1)
	go func() {
		defer close(refused)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := p.Authenticate(secret, t0); err != nil {
				refused <- err
				return
			}
		}
	}()
	for range 2000 {
		p.apply(recs, true)
	}
	close(stop)
	if err := <-refused; err != nil {
		t.Fatalf("a live key refused during a full reload: %v", err)
	}
}

// TestFileStoreSkipsUnreadableLines: the embedded store's log with lines
// that are not JSON and a record of a later format opens; each is
// reported once, left out, and kept as it is in the file; everything else
// is in force, and writes go on and survive another reopening.
func TestFileStoreSkipsUnreadableLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := t0
	s, err := OpenFileStore(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := openPlane(t, s, &now)
	ctx := context.Background()
	if _, err := p.CreateTeam(ctx, Spec{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	k, secret, err := p.CreateKey(ctx, Spec{Name: "one", Team: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("{\"seq\":3,\"kind\":\"key\",\"id\":\"key_x\",\"da\n") // complete line, not JSON
	f.WriteString("\xff\xfe\x00 binary\n")
	f.WriteString(`{"seq":4,"kind":"key","id":"key_later","data":{"format":2,"name":"later","digest":"` + strings.Repeat("0", 64) + `"}}` + "\n")
	f.Close()

	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	reopen := func() (*FileStore, *Plane) {
		t.Helper()
		s, err := OpenFileStore(dir, log)
		if err != nil {
			t.Fatalf("opening a log with unreadable lines: %v", err)
		}
		p, err := Open(ctx, s, Options{Clock: func() time.Time { return now }, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		return s, p
	}
	s2, p2 := reopen()
	if got, _, err := p2.Authenticate(secret, now); err != nil || got.ID != k.ID {
		t.Fatalf("a key beside unreadable lines: %v, %v", got, err)
	}
	if _, ok := p2.Key("key_later"); ok {
		t.Error("a key of a later format is in force")
	}
	reports := map[string]int{}
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec struct{ Msg, ID string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg != "" {
			reports[rec.Msg+" "+rec.ID]++
		}
	}
	want := map[string]int{"plane: skipping an unreadable line of the log ": 2, "plane: skipping a record that cannot be read key_later": 1}
	if !maps.Equal(reports, want) {
		t.Errorf("reported %v, want %v", reports, want)
	}
	k2, secret2, err := p2.CreateKey(ctx, Spec{Name: "two", Team: "acme"})
	if err != nil || k2.Version != 5 {
		t.Fatalf("a write after unreadable lines: %v, version %d, want 5", err, k2.Version)
	}
	s2.Close()

	s3, p3 := reopen()
	defer s3.Close()
	for _, sec := range []string{secret, secret2} {
		if _, _, err := p3.Authenticate(sec, now); err != nil {
			t.Errorf("after reopening again: %v", err)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil || !bytes.Contains(data, []byte(`"key_later"`)) {
		t.Errorf("the record of a later format is gone from the log (%v)", err)
	}
}

// TestRecordsShareTheirLimits: the cached records given the same limits
// hold one parse of them, a key's apart from a team's (keyed by the key,
// not the team); the parse is forgotten with its last holder, whether that
// record changes its limits, is deleted, or goes in a full reload.
func TestRecordsShareTheirLimits(t *testing.T) {
	t.Parallel()
	now := t0
	store := NewMemoryStore()
	p := openPlane(t, store, &now)
	ctx := context.Background()
	rpm := []byte(`[{"name": "rpm", "algorithm": "fixed_window", "limit": "100/min"}]`)
	if _, err := p.CreateTeam(ctx, Spec{Name: "acme", Limits: rpm}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, name := range []string{"a", "b", "c"} {
		k, _, err := p.CreateKey(ctx, Spec{Name: name, Team: "acme", Limits: rpm})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, k.ID)
	}
	limitsOf := func(id string) []config.Limit {
		k, ok := p.Key(id)
		if !ok {
			t.Fatalf("key %s not cached", id)
		}
		return k.Limits
	}
	a, b := limitsOf(ids[0]), limitsOf(ids[1])
	if &a[0] != &b[0] {
		t.Error("two keys given the same limits hold two parses of them")
	}
	team, _ := p.Team("acme")
	if &team.Limits[0] == &a[0] || team.Limits[0].Key[0] != TeamDescriptor || a[0].Key[0] != KeyDescriptor {
		t.Errorf("a team and a key share limits: team keyed by %v, key by %v", team.Limits[0].Key, a[0].Key)
	}
	held := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := 0
		for _, s := range p.limitSets.m {
			n += s.holders
		}
		return n
	}
	if n := held(); n != 4 {
		t.Errorf("%d records hold shared limits, want 4", n)
	}

	rph := []byte(`[{"name": "rph", "algorithm": "fixed_window", "limit": "1000/hour"}]`)
	if _, err := p.UpdateKey(ctx, ids[0], Spec{Name: "a", Team: "acme", Limits: rph}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteKey(ctx, ids[1], AnyVersion); err != nil {
		t.Fatal(err)
	}
	if got := limitsOf(ids[0]); got[0].Name != "rph" {
		t.Errorf("the updated key's limit is %q, want rph", got[0].Name)
	}
	if got := limitsOf(ids[2]); got[0].Name != "rpm" || &got[0] != &b[0] {
		t.Errorf("the key left alone lost its shared limits: %+v", got)
	}
	recs, _, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.apply(recs, true)
	if n := held(); n != 3 {
		t.Errorf("after an update, a deletion and a full reload %d records hold shared limits, want 3", n)
	}
	if err := p.DeleteKey(ctx, ids[2], AnyVersion); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	_, kept := p.limitSets.m[limitSetKey{key: true, raw: string(rpm)}]
	p.mu.Unlock()
	if kept {
		t.Error("the keys' rpm limits are kept after their last key was deleted")
	}
}

// TestKeysReadTheirTeamAsItChanges: a key sees its team's every change
// (through its slot), refuses calls while its team is gone and accepts
// them once a team of that name is back; a slot is forgotten once neither
// a team nor a key holds it.
func TestKeysReadTheirTeamAsItChanges(t *testing.T) {
	t.Parallel()
	now := t0
	p := openPlane(t, NewMemoryStore(), &now)
	ctx := context.Background()
	if _, err := p.CreateTeam(ctx, Spec{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	k, secret, err := p.CreateKey(ctx, Spec{Name: "k", Team: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	want := func(step string, wantErr error) {
		t.Helper()
		_, team, err := p.Authenticate(secret, now)
		switch {
		case !errors.Is(err, wantErr):
			t.Errorf("%s: %v, want %v", step, err, wantErr)
		case err == nil && (team == nil || team.ID != "acme"):
			t.Errorf("%s: team %+v, want acme", step, team)
		}
	}
	want("created", nil)
	if _, err := p.UpdateTeam(ctx, "acme", Spec{Disabled: true}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	want("team disabled", ErrKeyDisabled)
	if _, err := p.UpdateTeam(ctx, "acme", Spec{}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	want("team enabled again", nil)
	// DeleteTeam refuses a team with keys; a replica may still see the
	// team go first (another replica's writes, a reload).
	if err := p.remove(ctx, KindTeam, "acme", AnyVersion); err != nil {
		t.Fatal(err)
	}
	want("team gone", ErrUnknownKey)
	if _, err := p.CreateTeam(ctx, Spec{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	want("team back", nil)
	slots := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.slots)
	}
	if n := slots(); n != 1 {
		t.Errorf("%d team slots for one team, want 1", n)
	}
	if err := p.DeleteKey(ctx, k.ID, AnyVersion); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteTeam(ctx, "acme", AnyVersion); err != nil {
		t.Fatal(err)
	}
	if n := slots(); n != 0 {
		t.Errorf("%d team slots once the team and its key are gone, want 0", n)
	}
}
