package service

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/plane"
)

// Level is where a limit comes from: the configuration (a plan's quotas
// and every other configured limit), or, for a call made with a plane key,
// the key's team or the key itself.
type Level uint8

// The levels, from the lowest precedence to the highest.
const (
	LevelPlan Level = iota // the configuration (the plan's and every other limit)
	LevelTeam
	LevelKey
)

// String returns "plan", "team" or "key".
func (l Level) String() string {
	switch l {
	case LevelPlan:
		return "plan"
	case LevelTeam:
		return "team"
	case LevelKey:
		return "key"
	}
	return fmt.Sprintf("Level(%d)", uint8(l))
}

// levels are the plane's limits of one call, its key's and its team's,
// and the names of those levels: the team's id, the key's display name.
// plane marks a call made with a plane key or for a plane team (whose
// budgets take the plane's hash tag: planeTags), limits or none.
type levels struct {
	team, key         []config.Limit
	teamName, keyName string
	plane             bool
}

// replace reports whether a limit named name at level at gives way to one
// of that name at a higher level: a limit of the same name on the key
// replaces the team's, which replaces the plan's; limits of different
// names all apply.
func (lv levels) replace(name string, at Level) bool {
	if lv.team == nil && lv.key == nil {
		return false
	}
	has := func(ls []config.Limit) bool {
		return slices.ContainsFunc(ls, func(l config.Limit) bool { return l.Name == name })
	}
	switch at {
	case LevelPlan:
		return has(lv.team) || has(lv.key)
	case LevelTeam:
		return has(lv.key)
	}
	return false
}

// planeLevels resolves a request's api key, one the configuration does not
// list, in the plane when it has the form of a plane secret: it returns the
// descriptors the key stands for (api_key becomes the key's id, team its
// team, plan its plan, else its team's) and its levels' limits, or
// ErrUnauthorized. Other requests pass unchanged.
func (s *Service) planeLevels(cfg *config.Config, desc map[string]string) (map[string]string, levels, error) {
	apiKey := desc[plane.KeyDescriptor]
	if s.opts.Plane == nil || !plane.IsSecret(apiKey) {
		return desc, levels{}, nil
	}
	sum := sha256.Sum256([]byte(apiKey))
	desc, lv, _, err := s.resolvePlaneKey(cfg, desc, &sum)
	return desc, lv, err
}

func levelsOf(key *plane.Key, team *plane.Team) levels {
	lv := levels{key: key.Limits, keyName: key.Name, plane: true}
	if team != nil {
		lv.team, lv.teamName = team.Limits, team.ID
	}
	return lv
}

// keyDescriptors returns desc as a call made with key stands for it.
func keyDescriptors(cfg *config.Config, desc map[string]string, key *plane.Key, team *plane.Team) map[string]string {
	out := make(map[string]string, len(desc)+2)
	for k, v := range desc {
		out[k] = v
	}
	out[plane.KeyDescriptor] = plane.KeyValue(key)
	delete(out, plane.TeamDescriptor)
	plan := key.Plan
	if team != nil {
		out[plane.TeamDescriptor] = team.ID
		if plan == "" {
			plan = team.Plan
		}
	}
	if plan != "" {
		out["plan"] = plan
	}
	if out["plan"] == "" && cfg.DefaultPlan != "" {
		out["plan"] = cfg.DefaultPlan
	}
	return out
}

// KnownPlan reports whether the configuration in force has a plan named
// name: a limit matches its requests (plan: name), as each plan's quotas do.
func (s *Service) KnownPlan(name string) bool {
	cfg := s.rules.Load().cfg
	if name == cfg.DefaultPlan {
		return name != ""
	}
	for _, l := range cfg.Limits {
		if l.Match["plan"] == config.Pattern(name) {
			return true
		}
	}
	return false
}

// PlanLimit reports whether the configuration in force has a limit named
// name that the calls of plan ("": the default plan) match by their plan
// (a limit of that plan, or one that matches no plan): the limit a plane
// record's limit of that name replaces.
func (s *Service) PlanLimit(plan, name string) bool {
	cfg := s.rules.Load().cfg
	plan = cmp.Or(plan, cfg.DefaultPlan)
	for _, l := range cfg.Limits {
		if want, ok := l.Match["plan"]; l.Name == name && (!ok || want == config.Pattern(plan)) {
			return true
		}
	}
	return false
}

// Usage is one limit that applies to a plane key, and its state.
type Usage struct {
	// Level is where the limit comes from; LevelName names it: the
	// key's name, the team's, or the plan's ("" for a configured limit a
	// call matches without a plan). See Outcome.
	Level     Level
	LevelName string
	// Name is the limit's name; Unit what it counts.
	Name string
	Unit Unit
	// Limit, Used and Remaining are in the limit's unit (micro-dollars for
	// usd); Used is Limit - Remaining, so a bucket's refill shows.
	Limit, Used, Remaining int64
	// Reset is when the budget is whole again.
	Reset time.Time
}

// KeyUsage reports every limit that applies to the plane key id (its own,
// its team's, its plan's and the configuration's), charging nothing.
// plane.ErrNotFound when there is no such key.
func (s *Service) KeyUsage(ctx context.Context, id string) ([]Usage, error) {
	if s.opts.Plane == nil {
		return nil, plane.ErrNotFound
	}
	key, ok := s.opts.Plane.Key(id)
	if !ok {
		return nil, plane.ErrNotFound
	}
	team, _ := s.opts.Plane.Team(key.Team)
	cfg := s.rules.Load().cfg
	return s.usage(ctx, keyDescriptors(cfg, map[string]string{}, key, team), levelsOf(key, team))
}

// TeamUsage reports the limits the keys of the plane team id share: the
// team's own, and the configuration's keyed by the team alone (a limit
// keyed by api_key is each key's: KeyUsage). Charging nothing.
// plane.ErrNotFound when there is no such team.
func (s *Service) TeamUsage(ctx context.Context, id string) ([]Usage, error) {
	if s.opts.Plane == nil {
		return nil, plane.ErrNotFound
	}
	team, ok := s.opts.Plane.Team(id)
	if !ok {
		return nil, plane.ErrNotFound
	}
	desc := map[string]string{plane.TeamDescriptor: team.ID}
	if plan := cmp.Or(team.Plan, s.rules.Load().cfg.DefaultPlan); plan != "" {
		desc["plan"] = plan
	}
	return s.usage(ctx, desc, levels{team: team.Limits, teamName: team.ID, plane: true})
}

// usage inspects the budgets a call with descriptors desc and plane levels
// lv draws from, naming each one's level.
func (s *Service) usage(ctx context.Context, desc map[string]string, lv levels) ([]Usage, error) {
	d, err := s.Inspect(ctx, Request{Descriptors: desc, key: &lv})
	if err != nil {
		return nil, err
	}
	out := make([]Usage, len(d.Limits))
	for i, o := range d.Limits {
		out[i] = Usage{Level: o.Level, LevelName: o.LevelName, Name: o.Name, Unit: o.Unit, Limit: o.Limit,
			Remaining: o.Remaining, Used: max(o.Limit-o.Remaining, 0), Reset: d.At.Add(o.ResetAfter)}
	}
	return out, nil
}
