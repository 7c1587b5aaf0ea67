package envoycompat

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// nativeLimit is one limit of tokenlimit's own format, as migrate prints it.
type nativeLimit struct {
	Name      string            `yaml:"name"`
	Match     map[string]string `yaml:"match,omitempty"`
	Key       []string          `yaml:"key,omitempty"`
	Algorithm string            `yaml:"algorithm"`
	Limit     string            `yaml:"limit"`
	Shadow    bool              `yaml:"shadow,omitempty"`
}

// nativePeriod is each unit as a native period.
var nativePeriod = map[Unit]string{Second: "s", Minute: "min", Hour: "h", Day: "day", Week: "7d", Month: "30d", Year: "365d"}

// Migration is what `tokenlimit migrate --from-envoy` prints: the native
// limits closest to an envoyproxy/ratelimit configuration, and the
// features of it that only the compatibility mode has.
type Migration struct {
	// YAML is a native configuration file (it has at least one limit, or
	// it is empty when nothing could be expressed).
	YAML []byte
	// Limits is how many limits YAML holds.
	Limits int
	// CompatOnly lists, per descriptor path, what native mode cannot
	// express or expresses differently.
	CompatOnly []string
}

// GlobalDifferences are the semantics every migrated configuration loses,
// whatever its content; docs/rls.md explains each.
var GlobalDifferences = []string{
	"native checks are all-or-nothing: a request over one limit charges none; envoyproxy/ratelimit counts every descriptor under its limit anyway",
	"native denials charge nothing; envoyproxy/ratelimit counts denied hits, so a client that keeps calling stays denied",
	"natively a descriptor-level hits_addend of 0 counts as 1; envoyproxy/ratelimit checks without counting",
	"natively a limit applies to a descriptor with more entries than it names; envoyproxy/ratelimit applies a limit only to a descriptor of exactly its depth",
	"natively every matching limit applies; envoyproxy/ratelimit applies only the most specific one (exact value, then wildcard, then key only)",
	"natively a descriptor that matches no limit is unlimited, as in envoyproxy/ratelimit, but an `unlimited` entry cannot switch off a limit that also matches",
}

var nameUnsafe = regexp.MustCompile(`[^a-z0-9_.-]+`)

// Migrate converts cfg to native limits where an equivalent exists.
func Migrate(cfg *Config) (Migration, error) {
	m := &migrator{names: map[string]int{}}
	for _, d := range cfg.Domains() {
		m.walk(d, cfg.domains[d], nil, d)
	}
	m.overlaps()
	var out Migration
	out.CompatOnly = m.notes
	out.Limits = len(m.limits)
	if len(m.limits) == 0 {
		return out, nil
	}
	ls := make([]nativeLimit, len(m.limits))
	for i, l := range m.limits {
		ls[i] = l.native
	}
	data, err := yaml.Marshal(map[string]any{"limits": ls})
	if err != nil {
		return Migration{}, fmt.Errorf("envoycompat: migrate: %w", err)
	}
	out.YAML = data
	return out, nil
}

// step is one level of a descriptor path: value "" for a key-only level;
// shared for a share_threshold wildcard.
type step struct {
	key, value string
	shared     bool
}

type migrated struct {
	native nativeLimit
	path   string
	steps  []step
}

type migrator struct {
	limits []migrated
	notes  []string
	names  map[string]int
}

func (m *migrator) note(path, format string, args ...any) {
	m.notes = append(m.notes, path+": "+fmt.Sprintf(format, args...))
}

func (m *migrator) walk(domain string, n *node, steps []step, path string) {
	for _, name := range n.order {
		c := n.children[name]
		p := path + "." + name
		s := append(slices.Clone(steps), step{c.key, c.value, c.shareThreshold})
		if c.limit != nil {
			m.limit(domain, c, s, p)
		}
		m.walk(domain, c, s, p)
	}
}

func (m *migrator) limit(domain string, n *node, steps []step, path string) {
	l := n.limit
	switch {
	case l.Unlimited:
		m.note(path, "unlimited (an allow-list entry): compatibility mode only")
		return
	case l.QuotaMode:
		m.note(path, "quota_mode: compatibility mode only")
		return
	case l.RequestsPerUnit == 0:
		m.note(path, "requests_per_unit 0 (deny everything): compatibility mode only")
		return
	}
	nl := nativeLimit{Match: map[string]string{"domain": domain}, Algorithm: "fixed_window", Shadow: l.ShadowMode,
		Limit: fmt.Sprintf("%d/%s", l.RequestsPerUnit, nativePeriod[l.Unit])}
	for _, s := range steps {
		switch wild := strings.HasSuffix(s.value, "*"); {
		case s.value == "" && strings.HasSuffix(s.key, "*"):
			m.note(path, "a key-only descriptor whose key ends in '*' (%q) matches other keys: compatibility mode only", s.key)
			return
		case s.value == "":
			nl.Key = append(nl.Key, s.key)
		case wild && s.shared:
			nl.Match[s.key] = s.value // one budget for every matching value
		case wild:
			nl.Match[s.key] = s.value
			nl.Key = append(nl.Key, s.key)
		default: // a '*' before the end is an ordinary character, natively too
			nl.Match[s.key] = s.value
		}
	}
	if len(l.Replaces) > 0 {
		m.note(path, "replaces %s: compatibility mode only; natively both limits apply", strings.Join(l.Replaces, ", "))
	}
	nl.Name = m.name(l.Name, path)
	m.limits = append(m.limits, migrated{native: nl, path: path, steps: steps})
}

// name is a native limit name from the envoy name or the path, unique.
func (m *migrator) name(envoyName, path string) string {
	base := envoyName
	if base == "" {
		base = path
	}
	base = strings.Trim(nameUnsafe.ReplaceAllString(strings.ToLower(base), "-"), "-.")
	if base == "" {
		base = "limit"
	}
	m.names[base]++
	if k := m.names[base]; k > 1 {
		return fmt.Sprintf("%s-%d", base, k)
	}
	return base
}

// overlaps notes each pair of migrated limits that a request can select
// together natively where envoyproxy/ratelimit would apply one of them.
func (m *migrator) overlaps() {
	for i, a := range m.limits {
		for _, b := range m.limits[i+1:] {
			if a.native.Match["domain"] == b.native.Match["domain"] && overlap(a.steps, b.steps) {
				m.note(b.path, "natively applies together with %s (%s); envoyproxy/ratelimit applies only one of them to a descriptor", a.native.Name, a.path)
			}
		}
	}
}

// overlap reports whether some descriptor with at least as many entries as
// the longer of a and b matches both natively (a prefix of the other, each
// level compatible).
func overlap(a, b []step) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	for i, s := range a {
		if s.key != b[i].key || !valuesOverlap(s.value, b[i].value) {
			return false
		}
	}
	return true
}

func valuesOverlap(a, b string) bool {
	if a == "" || b == "" {
		return true
	}
	pa, wa := strings.CutSuffix(a, "*")
	pb, wb := strings.CutSuffix(b, "*")
	switch {
	case wa && wb:
		return strings.HasPrefix(pa, pb) || strings.HasPrefix(pb, pa)
	case wa:
		return strings.HasPrefix(b, pa)
	case wb:
		return strings.HasPrefix(a, pb)
	}
	return a == b
}
