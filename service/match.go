package service

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/validutf8"
	"github.com/tokenlimit/tokenlimit/plane"
)

// ruleset is one configuration, compiled. It is immutable once built.
type ruleset struct {
	version int64
	cfg     *config.Config
	// bounds tracks the live keys of each limit with max_keys, by name;
	// the trackers are shared with the ruleset a reload replaces.
	bounds map[string]*keyBound
	// matches holds each limit's Match (by index in cfg.Limits) as a
	// slice, quicker to walk per request than the map.
	matches [][]match
	// keyDigests holds the SHA-256 of each key under api_keys (listsKey).
	keyDigests map[[sha256.Size]byte]struct{}
}

// match is one descriptor a limit's Match requires, and its pattern.
type match struct {
	name    string
	pattern config.Pattern
}

// compile builds the ruleset of cfg; old, the ruleset it replaces (nil at
// start), lends it the key trackers of limits that keep their name.
func compile(cfg *config.Config, version int64, old *ruleset) *ruleset {
	var bounds map[string]*keyBound
	if old != nil {
		bounds = old.bounds
	}
	return &ruleset{version: version, cfg: cfg, bounds: keyBounds(cfg, bounds), matches: matches(cfg), keyDigests: keyDigests(cfg)}
}

// matches returns the Match of each of cfg's limits as a slice.
func matches(cfg *config.Config) [][]match {
	out := make([][]match, len(cfg.Limits))
	for i, l := range cfg.Limits {
		for name, p := range l.Match {
			out[i] = append(out[i], match{name, p})
		}
	}
	return out
}

// check is one limit to decide for one request.
type check struct {
	limit   *config.Limit
	request int
	desc    map[string]string // the request's, enriched
	item    tokenlimit.Item
	// own marks a limit of the caller's (CheckLimit), which no
	// reservation charges.
	own bool
	// level is where limit comes from, levelName that level's name (see
	// Outcome).
	level     Level
	levelName string
}

// outcome is c's answer r: the limit's name and level, its budget's key,
// the request's cost under it.
func (c *check) outcome(r tokenlimit.Result) Outcome {
	return Outcome{Name: c.limit.Name, Key: c.item.Key, Request: c.request, Cost: c.item.Cost, Shadow: c.limit.Shadow,
		Level: c.level, LevelName: c.levelName, Unit: unitOf(c.limit), Result: r}
}

// plan holds the checks of one service call, split into enforced and shadow.
type plan struct {
	enforced []check
	shadow   []check
}

// plan validates requests and selects their limits, concurrency limits
// excepted: they only apply to reservations (see planFor). The enforced
// checks are appended to enforced: a caller's buffer for the usual few,
// which stays on its stack as long as the plan does.
func (s *Service) plan(reqs []Request, enforced []check) (plan, error) {
	return s.planWith(reqs, enforced, false, true)
}

// planBuffer is the room for the enforced checks of a plan on its caller's
// stack: a request with more limits allocates.
type planBuffer [2]check

// planFor is plan, with the concurrency limits too when inFlight is true.
// It is for calls that charge: a new key of a limit with max_keys takes a
// place among the limit's live keys (see planWith).
func (s *Service) planFor(reqs []Request, inFlight bool) (plan, error) {
	return s.planWith(reqs, nil, inFlight, true)
}

// planWith is planFor, appending the enforced checks to enforced; take
// false (inspection, reset) routes keys as a charge would but makes no new
// key live.
func (s *Service) planWith(reqs []Request, enforced []check, inFlight, take bool) (plan, error) {
	rules := s.rules.Load()
	p := plan{enforced: enforced}
	var now time.Time // read once a limit needs it: a calendar window, max_keys
	for i, r := range reqs {
		empty, err := s.validate(i, r)
		if err != nil {
			return plan{}, err
		}
		id, listed := identityOf(rules.cfg, r.Descriptors)
		desc := enrich(rules.cfg, r.Descriptors, empty, id, listed)
		var lv levels
		if r.key != nil {
			lv = *r.key
		} else if s.opts.Plane != nil && !listed {
			if desc, lv, err = s.planeLevels(rules.cfg, desc); err != nil {
				return plan{}, err
			}
		}
		cost := r.Cost
		if cost == 0 {
			cost = 1
		}
		t := tags{hashTag: rules.cfg.HashTag}
		if lv.plane {
			t = planeTags(rules.cfg.HashTag, desc)
		}
		sel := selector{s: s, rules: rules, desc: desc, tags: t, overrides: id.Overrides, request: i, cost: cost, spend: r.Spend, usage: r.Usage, limit: r.Limit, inFlight: inFlight, take: take, now: &now, p: &p}
		plan := desc["plan"]
		for li := range rules.cfg.Limits {
			if l := &rules.cfg.Limits[li]; !lv.replace(l.Name, LevelPlan) {
				sel.add(l, rules.matches[li], LevelPlan, plan)
			}
		}
		for _, level := range [...]struct {
			limits []config.Limit
			level  Level
			name   string
		}{{lv.team, LevelTeam, lv.teamName}, {lv.key, LevelKey, lv.keyName}} {
			for li := range level.limits {
				if l := &level.limits[li]; !lv.replace(l.Name, level.level) {
					sel.add(l, nil, level.level, level.name)
				}
			}
		}
	}
	return p, nil
}

// selector adds the checks of one request to a plan.
type selector struct {
	s              *Service
	rules          *ruleset
	desc           map[string]string
	tags           tags
	overrides      map[string]tokenlimit.Limit // the api key's, under api_keys
	request        int
	cost, spend    int64
	usage          *config.Usage
	limit          *RequestLimit // the request's own limit, if any
	inFlight, take bool
	now            *time.Time
	p              *plan
}

// add adds the check of l, whose Match is want, if it applies; l comes
// from level, named levelName (see Outcome): the configuration's max_keys
// trackers apply to the plan's limits only (not to a plane limit's
// budget).
func (sel *selector) add(l *config.Limit, want []match, level Level, levelName string) {
	key, ok := applies(l, want, sel.desc, sel.tags)
	if !ok || (l.Concurrency && !sel.inFlight) {
		return
	}
	if sel.now.IsZero() && (l.Calendar != config.NoCalendar || l.MaxKeys != 0) {
		*sel.now = sel.s.opts.Clock()
	}
	limit, suffix := effective(sel.rules.cfg, l, sel.overrides, *sel.now)
	if sel.limit != nil && l.RLSOverride {
		limit, suffix = sel.limit.apply(limit), suffix+sel.limit.keySuffix()
	}
	if level == LevelPlan {
		key = sel.s.boundKey(sel.rules, l, key, suffix, limit, *sel.now, sel.take)
	} else {
		key += suffix
	}
	c := check{limit: l, request: sel.request, desc: sel.desc, level: level, levelName: levelName,
		item: tokenlimit.Item{Key: key, Limit: limit, Cost: sel.costOf(l)}}
	if l.Shadow {
		sel.p.shadow = append(sel.p.shadow, c)
	} else {
		sel.p.enforced = append(sel.p.enforced, c)
	}
}

// costOf returns the request's cost under l. A plan that charges nothing
// (take false: an inspection, a reset) costs nothing and evaluates no cost
// expression, which could fail without the request's usage.
func (sel *selector) costOf(l *config.Limit) int64 {
	if !sel.take {
		return 0
	}
	cost, err := l.Cost.Of(sel.desc, sel.cost, sel.spend, sel.usage)
	if err != nil {
		sel.s.metrics.costFailed(l.Name, err)
	}
	return cost
}

// validate checks request i, r, and reports whether one of its descriptors
// has an empty value (enrich drops them).
func (s *Service) validate(i int, r Request) (empty bool, err error) {
	if r.Spend < 0 || r.Spend > tokenlimit.MaxCost {
		return false, invalid("requests[%d].spend: must be between 0 and %d micro-dollars, got %d", i, int64(tokenlimit.MaxCost), r.Spend)
	}
	if r.Cost < 0 || r.Cost > tokenlimit.MaxCost {
		return false, invalid("requests[%d].cost: must be between 0 and %d, got %d", i, int64(tokenlimit.MaxCost), r.Cost)
	}
	if r.Wait < 0 || r.Wait > config.MaxWait {
		return false, invalid("requests[%d].wait: must be between 0 and %v, got %v", i, config.MaxWait, r.Wait)
	}
	if l := r.Limit; l != nil {
		if l.Quota < 1 || l.Quota > tokenlimit.MaxQuota {
			return false, invalid("requests[%d].limit.quota: must be between 1 and %d, got %d", i, int64(tokenlimit.MaxQuota), l.Quota)
		}
		if l.Period < time.Second || l.Period > tokenlimit.MaxPeriod || l.Period%time.Second != 0 {
			return false, invalid("requests[%d].limit.period: must be whole seconds from 1s to %v, got %v", i, tokenlimit.MaxPeriod, l.Period)
		}
	}
	for name, v := range r.Descriptors {
		empty = empty || v == ""
		switch {
		case name == "" || len(name) > 64:
			return false, invalid("requests[%d].descriptors: names must be 1-64 bytes, got %q", i, name)
		case !validutf8.String(name):
			return false, invalid("requests[%d].descriptors: names must be valid UTF-8, got %q", i, name)
		case len(v) > s.opts.MaxDescriptorLength:
			return false, invalid("requests[%d].descriptors.%s: at most %d bytes, got %d", i, name, s.opts.MaxDescriptorLength, len(v))
		case !validutf8.String(v):
			// Refused rather than repaired: replacing the invalid bytes
			// would give distinct values one budget.
			return false, invalid("requests[%d].descriptors.%s: not valid UTF-8", i, name)
		}
	}
	return empty, nil
}

// identityOf returns what the configuration's api_keys say of the api key
// in d; listed is false when d has none or it is not listed.
func identityOf(cfg *config.Config, d map[string]string) (id config.Identity, listed bool) {
	if len(cfg.APIKeys) == 0 {
		return config.Identity{}, false
	}
	k := d["api_key"]
	if k == "" {
		return config.Identity{}, false
	}
	id, listed = cfg.APIKeys[k]
	return id, listed
}

// enrich adds what the configuration knows of the request's api key (id,
// when listed: user, tenant, plan) and the default plan, without
// overriding given descriptors, and drops empty values (empty reports
// whether d has one). The result must not be modified: when there is
// nothing to add or drop it is d itself.
func enrich(cfg *config.Config, d map[string]string, empty bool, id config.Identity, listed bool) map[string]string {
	if !empty && !listed && (cfg.DefaultPlan == "" || d["plan"] != "") {
		return d
	}
	out := make(map[string]string, len(d)+3)
	for k, v := range d {
		if v != "" {
			out[k] = v
		}
	}
	if listed {
		setIfEmpty(out, "user", id.User)
		setIfEmpty(out, "tenant", id.Tenant)
		setIfEmpty(out, "plan", id.Plan)
	}
	setIfEmpty(out, "plan", cfg.DefaultPlan)
	return out
}

func setIfEmpty(d map[string]string, k, v string) {
	if d[k] == "" && v != "" {
		d[k] = v
	}
}

// tags says which hash tag a budget's key takes (see applies).
type tags struct {
	// hashTag is the configuration's hash_tag: the descriptor whose value
	// tags the limits keyed by it ("" for none).
	hashTag string
	// plane and planeValue, for a call made with a plane key while
	// hash_tag is set, are the call's own tag: the key's team ("team" and
	// the team's name, escaped), or the key itself ("api_key" and its
	// digest) when it has no team. Every limit keyed by team or api_key
	// takes it, so that the key's, its team's and the plan's limits per key
	// or per team share one slot; "" otherwise (see planeTags).
	plane, planeValue string
}

// planeTags returns the tags of a call made with a plane key, whose
// descriptors desc are keyDescriptors': the configuration's, and the team's
// (else the key's) as the call's own when hash_tag is set. A team's budget
// is one key for all the team's keys, so the tag of every call that can
// reach it must be the team's; a key's budget is reached only through that
// key, which has one team.
func planeTags(hashTag string, desc map[string]string) tags {
	t := tags{hashTag: hashTag}
	if hashTag == "" {
		return t
	}
	if team, ok := desc[plane.TeamDescriptor]; ok {
		t.plane, t.planeValue = plane.TeamDescriptor, keyValue(plane.TeamDescriptor, team)
	} else {
		t.plane, t.planeValue = plane.KeyDescriptor, keyValue(plane.KeyDescriptor, desc[plane.KeyDescriptor])
	}
	return t
}

// tag returns the hash tag l's key takes, as a descriptor's name and its
// value (escaped), given the escaped values of l's Key in order; "" when
// it takes none.
func (t tags) tag(l *config.Limit, values []string) (name, value string) {
	if t.plane != "" && (slices.Contains(l.Key, plane.TeamDescriptor) || slices.Contains(l.Key, plane.KeyDescriptor)) {
		return t.plane, t.planeValue
	}
	if t.hashTag != "" {
		if i := slices.Index(l.Key, t.hashTag); i >= 0 {
			return t.hashTag, values[i]
		}
	}
	return "", ""
}

// applies reports whether l, whose Match is want, selects a request with
// descriptors d, and the budget's key: "<name>|<dim>=<value>|...", values
// escaped so that no value can forge another key or a Redis Cluster hash
// tag, and api keys replaced by their digest (DigestAPIKey) so that no
// secret is stored in a key or shown in an answer. When t gives l a hash
// tag (see tags), the key starts with "{<dim>=<value>}": the budgets of one
// request that share it land in one Redis Cluster slot.
func applies(l *config.Limit, want []match, d map[string]string, t tags) (string, bool) {
	for _, m := range want {
		v, ok := d[m.name]
		if !ok || !m.pattern.Matches(v) {
			return "", false
		}
	}
	// The values, escaped, are gathered first so that the key is built in
	// one allocation of its exact size.
	var buf [8]string
	values := buf[:0]
	size := len(l.Name)
	for _, dim := range l.Key {
		v, ok := d[dim]
		if !ok {
			return "", false
		}
		v = keyValue(dim, v)
		values = append(values, v)
		size += 2 + len(dim) + len(v)
	}
	tagName, tagValue := t.tag(l, values)
	if tagName != "" {
		size += 3 + len(tagName) + len(tagValue)
	}
	var sb strings.Builder
	sb.Grow(size)
	if tagName != "" {
		sb.WriteByte('{')
		sb.WriteString(tagName)
		sb.WriteByte('=')
		sb.WriteString(tagValue)
		sb.WriteString("}|")
	}
	sb.WriteString(l.Name)
	for i, dim := range l.Key {
		sb.WriteByte('|')
		sb.WriteString(dim)
		sb.WriteByte('=')
		sb.WriteString(values[i])
	}
	return sb.String(), true
}

// keyValue is how a descriptor's value is written in a key: escaped, and an
// api key only as its digest.
func keyValue(dim, v string) string {
	if dim == "api_key" {
		v = DigestAPIKey(v)
	}
	return url.QueryEscape(v)
}

// effective returns the engine limit that l applies at now to a request
// whose api key has overrides (those of its entry under api_keys; nil for
// none), and the suffix its key gets: the api key's override replaces the
// configured parameters, and a calendar quota becomes the window of the
// current day or month, labelled in the key.
func effective(cfg *config.Config, l *config.Limit, overrides map[string]tokenlimit.Limit, now time.Time) (tokenlimit.Limit, string) {
	limit := l.Limit
	if o, ok := overrides[l.Name]; ok {
		limit = o
	}
	if l.Calendar == config.NoCalendar {
		return limit, ""
	}
	label, limit := calendarWindow(limit, l.Calendar, cfg.Location, now)
	return limit, "|" + label
}

// calendarWindow turns a fixed window into the window of the current day or
// month in loc, returning the period's label: the window starts at the
// period's start and lasts until its end (days of 23 or 25 hours and months
// of 28 to 31 days included).
func calendarWindow(lim tokenlimit.Limit, calendar config.Calendar, loc *time.Location, now time.Time) (string, tokenlimit.Limit) {
	t := now.In(loc)
	var start, end time.Time
	var label string
	if calendar == config.Month {
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, loc)
		end = start.AddDate(0, 1, 0)
		label = start.Format("2006-01")
	} else {
		start = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc)
		end = start.AddDate(0, 0, 1)
		label = start.Format("2006-01-02")
	}
	period := end.Sub(start)
	lim.Period = period
	lim.Offset = time.Duration(start.UnixMilli()%period.Milliseconds()) * time.Millisecond
	return label, lim
}

// DigestAPIKey is how an api key appears in budget keys: "sha256-" and the
// first 16 hex digits of its SHA-256, enough to tell keys apart, useless to
// call the API with.
func DigestAPIKey(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return "sha256-" + hex.EncodeToString(sum[:8])
}
