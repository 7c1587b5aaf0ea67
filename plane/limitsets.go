package plane

import (
	"encoding/json"

	"github.com/tokenlimit/tokenlimit/config"
)

// limitSets holds the parsed limits of each distinct limits JSON that the
// plane's records give, with the number of records holding them: records
// given the same limits (keys made from one template) share one parse.
// It takes their memory once, and a decision with any of those keys reads
// limits that other decisions keep in the CPU's caches: at 100,000 keys,
// a key's limits of its own cost more than the rest of its lookup
// (planeload in bench). Not safe for concurrent use: the plane's apply
// serializes it. The zero value is ready to use.
type limitSets struct {
	m map[limitSetKey]*limitSet
}

type limitSetKey struct {
	key bool // a key's limits, not a team's (parseLimits keys them apart)
	raw string
}

type limitSet struct {
	limits  []config.Limit
	holders int
}

// acquire returns the limits raw gives a key's or a team's record (see
// parseLimits), parsed once for every record holding them, and counts one
// holder more; nil without an error for no limits. A parse error counts
// nothing.
func (s *limitSets) acquire(raw json.RawMessage, key bool) ([]config.Limit, error) {
	if noLimits(raw) {
		return nil, nil
	}
	k := limitSetKey{key, string(raw)}
	if set, ok := s.m[k]; ok {
		set.holders++
		return set.limits, nil
	}
	limits, err := parseLimits(raw, key)
	if err != nil {
		return nil, err
	}
	if s.m == nil {
		s.m = map[limitSetKey]*limitSet{}
	}
	s.m[k] = &limitSet{limits: limits, holders: 1}
	return limits, nil
}

// release counts one holder fewer of the limits raw gave a record
// (acquire), and forgets them with the last one.
func (s *limitSets) release(raw json.RawMessage, key bool) {
	if noLimits(raw) {
		return
	}
	k := limitSetKey{key, string(raw)}
	if set, ok := s.m[k]; ok {
		if set.holders--; set.holders == 0 {
			delete(s.m, k)
		}
	}
}
