// Package plane is the quota plane: teams and api keys as records beside
// the configured limits, created, changed and revoked at runtime through
// the admin API, kept in a Store (Redis, or a durable file for the embedded
// default) and read on the hot path from a cache the store keeps current.
//
// Precedence, in one sentence: a limit of the same name on the key replaces
// the team's, which replaces the plan's; limits of different names all apply.
//
// A key's secret is answered once, when it is created or rotated: the plane
// keeps only its SHA-256 digest.
package plane

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tokenlimit/tokenlimit/config"
)

// Team is a tenant: a plan, labels, and limits of its own, each one budget
// shared by all of the team's keys. Values are immutable once stored.
type Team struct {
	// ID is the team's name: teams are addressed by name, keys name
	// their team.
	ID string
	// Common holds what teams and keys share.
	Common
}

// Key is an api key: a team (or none), a plan, labels, and limits of its
// own, each one budget for the key. Values are immutable once stored.
type Key struct {
	// ID names the key in the admin API ("key_" and 24 hex digits); it is
	// not a secret.
	ID string
	// Team is the name of the key's team, "" for none.
	Team string
	// Digest is the SHA-256 of the key's secret, hex.
	Digest string
	// PrevDigest, until PrevUntil, is the digest of the secret the last
	// rotation replaced, still accepted during its grace period.
	PrevDigest string
	PrevUntil  time.Time
	Common
	// Derived at decoding (prepare): the api_key descriptor value that
	// keys its budgets, and the raw digests (zero for none).
	value        string
	raw, prevRaw [32]byte
	// slot holds its team (nil without one), set once the plane caches
	// the key.
	slot *teamSlot
}

// Common is what teams and keys share.
type Common struct {
	// Name is a team's id, a key's display name.
	Name   string
	Labels map[string]string
	// Plan is a plan of the configuration ("" for none: a key then
	// follows its team's plan, then the configuration's default plan).
	Plan string
	// Limits are the record's own limits, validated, in the order given;
	// RawLimits is how they were given (JSON), kept to show and store them.
	Limits    []config.Limit
	RawLimits json.RawMessage
	// ExpiresAt, if not zero, is when the record stops being valid.
	ExpiresAt time.Time
	// Disabled records refuse every call until enabled again.
	Disabled bool
	// Version is the store's sequence number of the record's last write:
	// its ETag. 0 for a record never stored.
	Version int64
	// UpdatedAt is when the record was last written.
	UpdatedAt time.Time
}

// Spec is a team or key as the admin API receives it. Every field is
// optional but the name; Team applies to keys only.
type Spec struct {
	Name      string            `json:"name"`
	Team      string            `json:"team,omitempty"`
	Plan      string            `json:"plan,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	ExpiresAt string            `json:"expires_at,omitempty"`
	Disabled  bool              `json:"disabled,omitempty"`
	Limits    json.RawMessage   `json:"limits,omitempty"`
}

// FieldError is invalid input: the field at fault, as a JSON path such as
// "limits[1].refill", and why.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Bounds of a record's fields.
const (
	// MaxLabelBytes bounds a label's value, in bytes.
	MaxLabelBytes = 256
	// MaxLabels bounds a record's labels.
	MaxLabels = 64
	// MaxLimits bounds a record's own limits.
	MaxLimits = 32
	// MaxNameBytes bounds a key's name.
	MaxNameBytes = 128
)

var (
	teamName  = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	labelName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_./-]{0,62}$`)
)

// Env is what validation checks a spec against.
type Env struct {
	// Now is the time expiries must be after.
	Now time.Time
	// KnownPlan reports whether the configuration has the plan; nil
	// knows none.
	KnownPlan func(plan string) bool
	// PlanLimit reports whether the configuration has a limit named name
	// for the calls of plan ("": the default plan); nil knows none.
	PlanLimit func(plan, name string) bool
	// Team returns the team named team; nil knows none.
	Team func(team string) (*Team, bool)
}

func (env Env) team(name string) (*Team, bool) {
	if env.Team == nil || name == "" {
		return nil, false
	}
	return env.Team(name)
}

// common validates what teams and keys share; key tells which the spec is.
func (s *Spec) common(env Env, key bool) (Common, error) {
	c := Common{Name: s.Name, Plan: s.Plan, Labels: s.Labels, Disabled: s.Disabled, RawLimits: s.Limits}
	switch {
	case key && (s.Name == "" || len(s.Name) > MaxNameBytes || strings.ContainsFunc(s.Name, isControl)):
		return c, fieldErr("name", "want 1-%d bytes of text without control characters, got %q", MaxNameBytes, s.Name)
	case !key && !teamName.MatchString(s.Name):
		return c, fieldErr("name", "want 1-63 lowercase letters, digits, '_', '-' or '.', starting with a letter or digit; got %q", s.Name)
	case !key && s.Team != "":
		return c, fieldErr("team", "a team belongs to no team")
	}
	if s.Plan != "" && (env.KnownPlan == nil || !env.KnownPlan(s.Plan)) {
		return c, fieldErr("plan", "no plan named %q in the configuration", s.Plan)
	}
	if err := checkLabels(s.Labels); err != nil {
		return c, err
	}
	if s.ExpiresAt != "" {
		t, err := time.Parse(time.RFC3339, s.ExpiresAt)
		if err != nil {
			return c, fieldErr("expires_at", "want an RFC 3339 time such as 2027-01-01T00:00:00Z, got %q", s.ExpiresAt)
		}
		if !t.After(env.Now) {
			return c, fieldErr("expires_at", "%s is in the past", s.ExpiresAt)
		}
		c.ExpiresAt = t.UTC()
	}
	if err := s.checkOverrides(env, key); err != nil {
		return c, err
	}
	limits, err := parseLimits(s.Limits, key)
	if err != nil {
		return c, err
	}
	c.Limits = limits
	return c, nil
}

// checkOverrides refuses each limit of s that gives no algorithm, the
// shape of an override: a plane limit is given whole, and replaces the
// limit of its name at the levels below (the plan's; for a key, its
// team's too) or, of a new name, is added. The error names the limit that
// would be replaced, or says that there is none.
func (s *Spec) checkOverrides(env Env, key bool) error {
	if noLimits(s.Limits) {
		return nil
	}
	var raw []map[string]json.RawMessage
	if json.Unmarshal(s.Limits, &raw) != nil {
		return nil // parseLimits names what is wrong
	}
	for i, l := range raw {
		var name string
		if _, whole := l["algorithm"]; whole || json.Unmarshal(l["name"], &name) != nil || name == "" {
			continue
		}
		if err := s.overridden(env, key, i, name); err != nil {
			return err
		}
	}
	return nil
}

// overridden is the error of limits[i], an override of the limit name.
func (s *Spec) overridden(env Env, key bool, i int, name string) error {
	plan, where := s.Plan, "the configuration"
	var team *Team
	if key {
		team, _ = env.team(s.Team)
	}
	if plan == "" && team != nil {
		plan = team.Plan
	}
	if plan != "" {
		where = fmt.Sprintf("plan %q", plan)
	}
	inPlan := env.PlanLimit != nil && env.PlanLimit(plan, name)
	inTeam := team != nil && slices.ContainsFunc(team.Limits, func(l config.Limit) bool { return l.Name == name })
	switch {
	case inTeam:
		where = fmt.Sprintf("team %q", team.ID)
	case !inPlan && team != nil:
		return fieldErr(fmt.Sprintf("limits[%d].name", i), "%s and team %q have no limit %q to override; a limit of a new name is added, given whole (with its algorithm)", where, team.ID, name)
	case !inPlan:
		return fieldErr(fmt.Sprintf("limits[%d].name", i), "%s has no limit %q to override; a limit of a new name is added, given whole (with its algorithm)", where, name)
	}
	return fieldErr(fmt.Sprintf("limits[%d].algorithm", i), "missing: a limit that replaces %s's %q is given whole, not as changed values: give its algorithm and amounts, and its unit, cost and calendar if it has them", where, name)
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }

func checkLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fieldErr("labels", "at most %d labels, got %d", MaxLabels, len(labels))
	}
	for k, v := range labels {
		if !labelName.MatchString(k) {
			return fieldErr("labels", "label names are 1-63 letters, digits, '_', '.', '/' or '-', starting with a letter or digit; got %q", k)
		}
		if len(v) > MaxLabelBytes {
			return fieldErr("labels."+k, "at most %d bytes, got %d", MaxLabelBytes, len(v))
		}
	}
	return nil
}

// The descriptors a plane limit is keyed by: a team's limit is one budget
// for the team, a key's one budget for the key. The service sets them on
// a call made with a key: "team" to the team's name, "api_key" to
// KeyDescriptor(key).
const (
	TeamDescriptor = "team"
	KeyDescriptor  = "api_key"
)

// parseLimits validates a record's limits with the configuration's own
// rules (config.ParseLimits), keyed by the key or the team; the first
// error names its field.
func parseLimits(raw json.RawMessage, key bool) ([]config.Limit, error) {
	if noLimits(raw) {
		return nil, nil
	}
	limits, err := config.ParseLimits(raw, "limits")
	if err != nil {
		first, _, _ := strings.Cut(err.Error(), "\n")
		field, reason, ok := strings.Cut(first, ": ")
		if !ok {
			field, reason = "limits", first
		}
		return nil, &FieldError{Field: field, Reason: reason}
	}
	if len(limits) > MaxLimits {
		return nil, fieldErr("limits", "at most %d limits, got %d", MaxLimits, len(limits))
	}
	by := []string{TeamDescriptor}
	if key {
		by = []string{KeyDescriptor}
	}
	for i := range limits {
		limits[i].Key = by
	}
	return limits, nil
}

// noLimits reports whether raw gives no limits: empty, or null.
func noLimits(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// TeamOf validates s as a team.
func TeamOf(s Spec, env Env) (Team, error) {
	c, err := s.common(env, false)
	if err != nil {
		return Team{}, err
	}
	return Team{ID: s.Name, Common: c}, nil
}

// KeyOf validates s as a key (without its secret, which the plane adds).
func KeyOf(s Spec, env Env) (Key, error) {
	c, err := s.common(env, true)
	if err != nil {
		return Key{}, err
	}
	if _, ok := env.team(s.Team); s.Team != "" && !ok {
		return Key{}, fieldErr("team", "no team named %q", s.Team)
	}
	return Key{Team: s.Team, Common: c}, nil
}

// ErrInvalid marks input that is not a valid record (see FieldError).
var ErrInvalid = errors.New("plane: invalid record")

// Is makes a FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }
