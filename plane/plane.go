package plane

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Why a secret is refused; all match ErrUnauthorized.
var (
	ErrUnauthorized = errors.New("plane: unauthorized")
	ErrUnknownKey   = fmt.Errorf("%w: unknown or revoked key", ErrUnauthorized)
	ErrKeyDisabled  = fmt.Errorf("%w: the key or its team is disabled", ErrUnauthorized)
	ErrKeyExpired   = fmt.Errorf("%w: the key or its team has expired", ErrUnauthorized)
	// ErrInUse: a team that keys still name cannot be deleted.
	ErrInUse = errors.New("plane: the team still has keys")
)

// Options configures a Plane.
type Options struct {
	// Clock is the plane's time; time.Now when nil.
	Clock func() time.Time
	// KnownPlan reports whether the configuration has the plan; nil
	// knows none (records then take no plan).
	KnownPlan func(plan string) bool
	// PlanLimit reports whether the configuration has a limit named name
	// that applies to the calls of plan ("": the default plan), one a
	// record's limit of that name replaces; nil knows none.
	PlanLimit func(plan, name string) bool
	// Logger receives unreadable records and watch errors;
	// slog.Default() when nil.
	Logger *slog.Logger
}

// Plane holds the records of a Store in memory, kept current by the
// store's Watch, and writes through the store. Reads (Authenticate, Team,
// Key) take no lock and make no store call. It is safe for concurrent use.
type Plane struct {
	store Store
	opts  Options

	keys    sync.Map    // id -> *Key
	digests digestIndex // by digest, current or in its grace period
	teams   sync.Map    // id -> *Team

	// lmu guards the listing indexes, kept in order as records change so
	// that a page never sorts: every key and every team by id, and each
	// team's keys by id.
	lmu      sync.RWMutex
	keyList  ordered[*Key]
	teamKeys map[string]*ordered[*Key]
	teamList ordered[*Team]

	mu sync.Mutex // serializes apply
	// limitSets holds the records' parsed limits, shared by the records
	// given the same.
	limitSets limitSets
	// slots holds a slot for every team name that is a cached team's or
	// that a cached key names; keys point to theirs.
	slots map[string]*teamSlot
	// versions holds the last version applied of each record, deletions
	// included, so that a write seen twice (made here, then watched) or
	// late is applied once, in order.
	versions map[string]int64
	// watched is the sequence number up to which the store's writes have
	// been followed (Load, then Watch); -1 before a Load succeeded.
	watched int64
	// unreadable holds the version of each record last reported as
	// unreadable, kept across full reloads so that each version is
	// reported once.
	unreadable map[string]int64
}

// Open loads the records of store into a new Plane. Run keeps them
// current.
func Open(ctx context.Context, store Store, opts Options) (*Plane, error) {
	if store == nil {
		return nil, errors.New("plane: Open: store is nil")
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	p := &Plane{store: store, opts: opts, versions: map[string]int64{}, watched: -1, unreadable: map[string]int64{},
		keyList: ordered[*Key]{id: keyID}, teamKeys: map[string]*ordered[*Key]{}, teamList: ordered[*Team]{id: teamID},
		slots: map[string]*teamSlot{}}
	if err := p.load(ctx); err != nil {
		// Run loads once the store answers; until then the plane is empty.
		p.opts.Logger.Warn("plane: loading the records failed; retrying in the background", "error", err)
	}
	return p, nil
}

func (p *Plane) load(ctx context.Context) error {
	recs, seq, err := p.store.Load(ctx)
	if err != nil {
		return fmt.Errorf("plane: loading the records: %w", err)
	}
	p.apply(recs, true)
	p.watched = seq
	return nil
}

// Run loads the records if Open could not, then follows the store's
// writes made elsewhere, until ctx ends; it retries a second after a store
// error. Call it once.
func (p *Plane) Run(ctx context.Context) {
	for ctx.Err() == nil {
		var err error
		if p.watched < 0 {
			err = p.load(ctx)
		} else {
			p.watched, err = p.store.Watch(ctx, p.watched, p.apply)
		}
		if err == nil && p.watched >= 0 {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		p.opts.Logger.Warn("plane: following the store's writes failed; retrying", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func recordID(kind Kind, id string) string { return string(kind) + "/" + id }

// apply brings the cache up to recs; full replaces everything.
func (p *Plane) apply(recs []Record, full bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if full {
		keep := map[string]bool{}
		for _, r := range recs {
			keep[recordID(r.Kind, r.ID)] = true
		}
		p.teams.Range(func(id, _ any) bool {
			if !keep[recordID(KindTeam, id.(string))] {
				p.forget(KindTeam, id.(string))
			}
			return true
		})
		p.keys.Range(func(id, _ any) bool {
			if !keep[recordID(KindKey, id.(string))] {
				p.forget(KindKey, id.(string))
			}
			return true
		})
		clear(p.versions)
	}
	for _, r := range recs {
		p.applyOne(r)
	}
}

// applyOne applies r unless a later version of it was applied. Called with
// p.mu held.
func (p *Plane) applyOne(r Record) {
	rid := recordID(r.Kind, r.ID)
	if v, ok := p.versions[rid]; ok && r.Version <= v {
		return
	}
	p.versions[rid] = r.Version
	if r.Data == nil {
		p.forget(r.Kind, r.ID)
		delete(p.unreadable, rid)
		return
	}
	// A record is replaced in place, never forgotten first: a call made
	// meanwhile sees the old record or the new one, never none.
	var err error
	switch r.Kind {
	case KindTeam:
		var t *Team
		if t, err = decodeTeam(r, p.limitSets.acquire); err == nil {
			if old, ok := p.teams.Swap(t.ID, t); ok {
				p.limitSets.release(old.(*Team).RawLimits, false)
			}
			p.slot(t.ID).team.Store(t)
			p.lmu.Lock()
			p.teamList.put(t)
			p.lmu.Unlock()
		}
	case KindKey:
		var k *Key
		if k, err = decodeKey(r, p.limitSets.acquire); err == nil {
			p.holdSlot(k)
			p.digests.put(k.Digest, k)
			if k.PrevDigest != "" {
				p.digests.put(k.PrevDigest, k)
			}
			old, ok := p.keys.Swap(k.ID, k)
			if ok {
				p.unindex(old.(*Key))
				p.limitSets.release(old.(*Key).RawLimits, true)
				p.releaseSlot(old.(*Key))
			}
			p.list(k, old)
		}
	default:
		err = fmt.Errorf("plane: %s %s: unknown kind", r.Kind, r.ID)
	}
	if err == nil {
		delete(p.unreadable, rid)
		return
	}
	// Reported once per version, full reloads included; the record stays
	// out of force.
	p.forget(r.Kind, r.ID)
	if v, ok := p.unreadable[rid]; !ok || v != r.Version {
		p.unreadable[rid] = r.Version
		p.opts.Logger.Error("plane: skipping a record that cannot be read", "kind", string(r.Kind), "id", r.ID, "version", r.Version, "error", err)
	}
}

// forget drops kind/id from the cache. Called with p.mu held.
func (p *Plane) forget(kind Kind, id string) {
	if kind == KindTeam {
		if old, ok := p.teams.LoadAndDelete(id); ok {
			p.limitSets.release(old.(*Team).RawLimits, false)
		}
		if slot := p.slots[id]; slot != nil {
			slot.team.Store(nil)
			p.dropIdleSlot(id)
		}
		p.lmu.Lock()
		p.teamList.remove(id)
		p.lmu.Unlock()
		return
	}
	if old, ok := p.keys.LoadAndDelete(id); ok {
		p.unindex(old.(*Key))
		p.unlist(old.(*Key))
		p.limitSets.release(old.(*Key).RawLimits, true)
		p.releaseSlot(old.(*Key))
	}
}

func keyID(k *Key) string   { return k.ID }
func teamID(t *Team) string { return t.ID }

// list puts k in the listing indexes in place of old (nil, or the *Key
// k replaces). Called with p.mu held.
func (p *Plane) list(k *Key, old any) {
	p.lmu.Lock()
	defer p.lmu.Unlock()
	if old, ok := old.(*Key); ok && old.Team != k.Team {
		p.dropFromTeam(old)
	}
	p.keyList.put(k)
	if k.Team == "" {
		return
	}
	tk := p.teamKeys[k.Team]
	if tk == nil {
		tk = &ordered[*Key]{id: keyID}
		p.teamKeys[k.Team] = tk
	}
	tk.put(k)
}

// unlist drops k from the listing indexes. Called with p.mu held.
func (p *Plane) unlist(k *Key) {
	p.lmu.Lock()
	defer p.lmu.Unlock()
	p.keyList.remove(k.ID)
	p.dropFromTeam(k)
}

// dropFromTeam drops k from its team's index. Called with p.lmu held.
func (p *Plane) dropFromTeam(k *Key) {
	if tk := p.teamKeys[k.Team]; tk != nil {
		tk.remove(k.ID)
		if tk.empty() {
			delete(p.teamKeys, k.Team)
		}
	}
}

// unindex drops the digests that still point to k. Called with p.mu held.
func (p *Plane) unindex(k *Key) {
	p.digests.remove(k.Digest, k)
	if k.PrevDigest != "" {
		p.digests.remove(k.PrevDigest, k)
	}
}

// Authenticate returns the key whose secret is secret and its team (nil
// for none), or an error matching ErrUnauthorized: unknown or revoked,
// past its rotation grace, disabled or expired (the key or its team).
func (p *Plane) Authenticate(secret string, now time.Time) (*Key, *Team, error) {
	sum := sha256.Sum256([]byte(secret))
	return p.AuthenticateDigest(&sum, now)
}

// AuthenticateDigest is Authenticate for a secret whose SHA-256 the
// caller has taken already (the service takes it once per request).
func (p *Plane) AuthenticateDigest(sum *[sha256.Size]byte, now time.Time) (*Key, *Team, error) {
	k := p.digests.get(sum)
	if k == nil {
		return nil, nil, ErrUnknownKey
	}
	if !sameDigest(k.raw[:], sum[:]) && !(sameDigest(k.prevRaw[:], sum[:]) && now.Before(k.PrevUntil)) {
		return nil, nil, ErrUnknownKey
	}
	if err := usable(&k.Common, now); err != nil {
		return nil, nil, err
	}
	var team *Team
	if k.Team != "" {
		if team = k.slot.team.Load(); team == nil {
			return nil, nil, ErrUnknownKey
		}
		if err := usable(&team.Common, now); err != nil {
			return nil, nil, err
		}
	}
	return k, team, nil
}

func usable(c *Common, now time.Time) error {
	switch {
	case c.Disabled:
		return ErrKeyDisabled
	case !c.ExpiresAt.IsZero() && !now.Before(c.ExpiresAt):
		return ErrKeyExpired
	}
	return nil
}

// Team returns the team named id.
func (p *Plane) Team(id string) (*Team, bool) {
	v, ok := p.teams.Load(id)
	if !ok {
		return nil, false
	}
	return v.(*Team), true
}

// Key returns the key id.
func (p *Plane) Key(id string) (*Key, bool) {
	v, ok := p.keys.Load(id)
	if !ok {
		return nil, false
	}
	return v.(*Key), true
}

func (p *Plane) env() Env {
	return Env{Now: p.opts.Clock(), KnownPlan: p.opts.KnownPlan, PlanLimit: p.opts.PlanLimit, Team: p.Team}
}

// CreateTeam validates s and stores it as a new team; ErrConflict if a
// team has its name.
func (p *Plane) CreateTeam(ctx context.Context, s Spec) (*Team, error) {
	t, err := TeamOf(s, p.env())
	if err != nil {
		return nil, err
	}
	return p.putTeam(ctx, &t, 0)
}

// UpdateTeam replaces team id with s if its version is ifVersion
// (AnyVersion: any); s's name must be id or empty.
func (p *Plane) UpdateTeam(ctx context.Context, id string, s Spec, ifVersion int64) (*Team, error) {
	if s.Name == "" {
		s.Name = id
	}
	if s.Name != id {
		return nil, fieldErr("name", "a team is renamed by creating another; want %q or nothing, got %q", id, s.Name)
	}
	if _, ok := p.Team(id); !ok {
		return nil, ErrNotFound
	}
	t, err := TeamOf(s, p.env())
	if err != nil {
		return nil, err
	}
	return p.putTeam(ctx, &t, ifVersion)
}

func (p *Plane) putTeam(ctx context.Context, t *Team, ifVersion int64) (*Team, error) {
	t.UpdatedAt = p.opts.Clock().UTC()
	data := encodeTeam(t)
	v, err := p.store.Put(ctx, KindTeam, t.ID, ifVersion, data)
	if err != nil {
		return nil, writeErr(KindTeam, t.ID, err)
	}
	p.apply([]Record{{Kind: KindTeam, ID: t.ID, Version: v, Data: data}}, false)
	t.Version = v
	return t, nil
}

// DeleteTeam deletes team id if its version is ifVersion (AnyVersion:
// any) and no key names it (ErrInUse).
func (p *Plane) DeleteTeam(ctx context.Context, id string, ifVersion int64) error {
	p.lmu.RLock()
	inUse := p.teamKeys[id] != nil
	p.lmu.RUnlock()
	if inUse {
		return ErrInUse
	}
	return p.remove(ctx, KindTeam, id, ifVersion)
}

// CreateKey validates s and stores it as a new key, returning the key and
// its secret: the only time the secret is known.
func (p *Plane) CreateKey(ctx context.Context, s Spec) (*Key, string, error) {
	k, err := KeyOf(s, p.env())
	if err != nil {
		return nil, "", err
	}
	k.ID = newID()
	secret, digest := newSecret()
	k.Digest = digest
	key, err := p.putKey(ctx, &k, 0)
	if err != nil {
		return nil, "", err
	}
	return key, secret, nil
}

// UpdateKey replaces key id's fields with s (its secret stays) if its
// version is ifVersion (AnyVersion: the version cached here).
func (p *Plane) UpdateKey(ctx context.Context, id string, s Spec, ifVersion int64) (*Key, error) {
	old, ok := p.Key(id)
	if !ok {
		return nil, ErrNotFound
	}
	k, err := KeyOf(s, p.env())
	if err != nil {
		return nil, err
	}
	k.ID, k.Digest, k.PrevDigest, k.PrevUntil = id, old.Digest, old.PrevDigest, old.PrevUntil
	return p.putKey(ctx, &k, cmp.Or(max(ifVersion, 0), old.Version))
}

// RotateKey gives key id a new secret; the old one stays valid for grace
// (not at all when 0). ifVersion as for UpdateKey.
func (p *Plane) RotateKey(ctx context.Context, id string, grace time.Duration, ifVersion int64) (*Key, string, error) {
	old, ok := p.Key(id)
	if !ok {
		return nil, "", ErrNotFound
	}
	k := *old
	secret, digest := newSecret()
	k.Digest, k.PrevDigest, k.PrevUntil = digest, "", time.Time{}
	if grace > 0 {
		k.PrevDigest, k.PrevUntil = old.Digest, p.opts.Clock().Add(grace).UTC()
	}
	key, err := p.putKey(ctx, &k, cmp.Or(max(ifVersion, 0), old.Version))
	if err != nil {
		return nil, "", err
	}
	return key, secret, nil
}

func (p *Plane) putKey(ctx context.Context, k *Key, ifVersion int64) (*Key, error) {
	k.UpdatedAt = p.opts.Clock().UTC()
	data := encodeKey(k)
	v, err := p.store.Put(ctx, KindKey, k.ID, ifVersion, data)
	if err != nil {
		return nil, writeErr(KindKey, k.ID, err)
	}
	p.apply([]Record{{Kind: KindKey, ID: k.ID, Version: v, Data: data}}, false)
	k.Version = v
	return k, nil
}

// DeleteKey revokes key id if its version is ifVersion (AnyVersion: any).
func (p *Plane) DeleteKey(ctx context.Context, id string, ifVersion int64) error {
	return p.remove(ctx, KindKey, id, ifVersion)
}

func (p *Plane) remove(ctx context.Context, kind Kind, id string, ifVersion int64) error {
	v, err := p.store.Delete(ctx, kind, id, ifVersion)
	if err != nil {
		return writeErr(kind, id, err)
	}
	p.apply([]Record{{Kind: kind, ID: id, Version: v}}, false)
	return nil
}

// Filter selects keys in ListKeys; zero fields select all.
type Filter struct {
	Team, Plan string
	// Label "name=value" selects keys with that label.
	LabelName, LabelValue string
	// Disabled, if not nil, selects keys disabled or not.
	Disabled *bool
}

func (f Filter) matches(k *Key) bool {
	switch {
	case f.Team != "" && k.Team != f.Team, f.Plan != "" && k.Plan != f.Plan:
		return false
	case f.LabelName != "" && k.Labels[f.LabelName] != f.LabelValue:
		return false
	case f.Disabled != nil && k.Disabled != *f.Disabled:
		return false
	}
	return true
}

// ListKeys returns up to limit keys that f selects, by id, after the id
// after (""), and the id to continue after ("" at the end). A page walks
// the keys in order from after (only the team's keys with f.Team) and
// stops once it has limit keys and knows of one more: it never sorts. A key
// present from the first page to the last is returned exactly once; one
// added or removed meanwhile, at most once.
func (p *Plane) ListKeys(f Filter, after string, limit int) ([]*Key, string) {
	p.lmu.RLock()
	defer p.lmu.RUnlock()
	from := &p.keyList
	if f.Team != "" {
		if from = p.teamKeys[f.Team]; from == nil {
			return nil, ""
		}
	}
	return page(from, f.matches, after, limit)
}

// ListTeams returns up to limit teams by name after the name after, and
// the name to continue after ("" at the end).
func (p *Plane) ListTeams(after string, limit int) ([]*Team, string) {
	p.lmu.RLock()
	defer p.lmu.RUnlock()
	return page(&p.teamList, func(*Team) bool { return true }, after, limit)
}

// page returns up to limit values of o after the id after that match
// selects, and the id of the last one if another follows.
func page[V any](o *ordered[V], match func(V) bool, after string, limit int) ([]V, string) {
	var out []V
	more := false
	o.ascend(after, func(v V) bool {
		if !match(v) {
			return true
		}
		if len(out) == limit {
			more = true
			return false
		}
		out = append(out, v)
		return true
	})
	if !more || len(out) == 0 {
		return out, ""
	}
	return out, o.id(out[len(out)-1])
}
