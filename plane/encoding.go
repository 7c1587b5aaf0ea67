package plane

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tokenlimit/tokenlimit/config"
)

// Kind tells teams from keys in a store.
type Kind string

// The kinds of records.
const (
	KindTeam Kind = "team"
	KindKey  Kind = "key"
)

// Record is a stored record: its kind, id, version (the store's sequence
// number of its last write) and data (encode's JSON; nil for a deletion).
type Record struct {
	Kind    Kind
	ID      string
	Version int64
	Data    []byte
}

// format is the stored records' version: a record of a later format is
// reported and skipped, never misread.
const format = 1

// stored is a record's JSON in a store: never a secret, only its digest.
type stored struct {
	Format     int               `json:"format"`
	Name       string            `json:"name"`
	Team       string            `json:"team,omitempty"`
	Plan       string            `json:"plan,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Limits     json.RawMessage   `json:"limits,omitempty"`
	ExpiresAt  *time.Time        `json:"expires_at,omitempty"`
	Disabled   bool              `json:"disabled,omitempty"`
	Digest     string            `json:"digest,omitempty"`
	PrevDigest string            `json:"prev_digest,omitempty"`
	PrevUntil  *time.Time        `json:"prev_until,omitempty"`
	UpdatedAt  time.Time         `json:"updated_at"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func timeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func encodeCommon(c *Common) stored {
	return stored{Format: format, Name: c.Name, Plan: c.Plan, Labels: c.Labels, Limits: c.RawLimits,
		ExpiresAt: timePtr(c.ExpiresAt), Disabled: c.Disabled, UpdatedAt: c.UpdatedAt}
}

func encodeTeam(t *Team) []byte {
	data, _ := json.Marshal(encodeCommon(&t.Common)) // cannot fail: plain fields
	return data
}

func encodeKey(k *Key) []byte {
	s := encodeCommon(&k.Common)
	s.Team, s.Digest, s.PrevDigest, s.PrevUntil = k.Team, k.Digest, k.PrevDigest, timePtr(k.PrevUntil)
	data, _ := json.Marshal(s)
	return data
}

// limitsFunc parses a record's limits JSON; key tells a key's from a
// team's (parseLimits).
type limitsFunc func(raw json.RawMessage, key bool) ([]config.Limit, error)

// unmarshal reads r's JSON.
func unmarshal(r Record) (stored, error) {
	var s stored
	if err := json.Unmarshal(r.Data, &s); err != nil {
		return s, fmt.Errorf("plane: %s %s: unreadable: %w", r.Kind, r.ID, err)
	}
	if s.Format != format {
		return s, fmt.Errorf("plane: %s %s: format %d, this version reads %d", r.Kind, r.ID, s.Format, format)
	}
	return s, nil
}

// common returns what r, read as s, holds of Common, its limits parsed
// by limitsOf.
func (s *stored) common(r Record, limitsOf limitsFunc) (Common, error) {
	limits, err := limitsOf(s.Limits, r.Kind == KindKey)
	if err != nil {
		return Common{}, fmt.Errorf("plane: %s %s: %w", r.Kind, r.ID, err)
	}
	return Common{Name: s.Name, Plan: s.Plan, Labels: s.Labels, Limits: limits, RawLimits: s.Limits,
		ExpiresAt: timeOf(s.ExpiresAt), Disabled: s.Disabled, Version: r.Version, UpdatedAt: s.UpdatedAt}, nil
}

// decodeTeam reads the team record r, its limits parsed by limitsOf.
func decodeTeam(r Record, limitsOf limitsFunc) (*Team, error) {
	s, err := unmarshal(r)
	if err != nil {
		return nil, err
	}
	c, err := s.common(r, limitsOf)
	if err != nil {
		return nil, err
	}
	return &Team{ID: r.ID, Common: c}, nil
}

// decodeKey reads the key record r, its limits parsed by limitsOf last:
// once they are, nothing fails.
func decodeKey(r Record, limitsOf limitsFunc) (*Key, error) {
	s, err := unmarshal(r)
	if err != nil {
		return nil, err
	}
	if len(s.Digest) != 64 {
		return nil, fmt.Errorf("plane: key %s: no digest", r.ID)
	}
	if _, err := hex.DecodeString(s.Digest); err != nil || (s.PrevDigest != "" && len(s.PrevDigest) != 64) {
		return nil, fmt.Errorf("plane: key %s: a digest is not 64 hex digits", r.ID)
	}
	c, err := s.common(r, limitsOf)
	if err != nil {
		return nil, err
	}
	k := &Key{ID: r.ID, Team: s.Team, Digest: s.Digest, PrevDigest: s.PrevDigest, PrevUntil: timeOf(s.PrevUntil), Common: c}
	k.prepare()
	return k, nil
}
