// Package envoycompat is tokenlimit's compatibility mode with
// envoyproxy/ratelimit: it loads that service's YAML configuration unchanged
// and answers Rate Limit Service requests with its semantics, on top of a
// tokenlimit.Store. The gRPC and HTTP transports live in server/rlsv3;
// docs/rls.md lists where these semantics differ from tokenlimit's own.
package envoycompat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Unit is the unit of a rate limit, as envoyproxy/ratelimit names them.
type Unit int

// The units, in the numbering of Envoy's RateLimitResponse.RateLimit.Unit.
const (
	UnitUnknown Unit = iota
	Second
	Minute
	Hour
	Day
	Month
	Year
	Week
)

var unitNames = [...]string{"UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK"}

// unitSeconds is each unit's window in seconds: a month is 30 days and a
// year 365, windows aligned to the Unix epoch, as envoyproxy/ratelimit has it.
var unitSeconds = [...]int64{0, 1, 60, 3600, 86400, 30 * 86400, 365 * 86400, 7 * 86400}

// String is the unit's upper-case name ("MINUTE").
func (u Unit) String() string {
	if u < 0 || int(u) >= len(unitNames) {
		return fmt.Sprintf("Unit(%d)", int(u))
	}
	return unitNames[u]
}

// Seconds is the unit's window in seconds, 0 for an unknown unit.
func (u Unit) Seconds() int64 {
	if u <= UnitUnknown || int(u) >= len(unitSeconds) {
		return 0
	}
	return unitSeconds[u]
}

// parseUnit reads a unit name in any case; UNKNOWN is not a unit.
func parseUnit(s string) (Unit, bool) {
	i := slices.Index(unitNames[:], strings.ToUpper(s))
	return Unit(i), i > 0
}

// RateLimit is one descriptor's rate_limit.
type RateLimit struct {
	// RequestsPerUnit is how many hits each window of Unit admits.
	RequestsPerUnit uint32
	// Unit is the window; windows start at multiples of Unit.Seconds()
	// since the Unix epoch. UnitUnknown when Unlimited.
	Unit Unit
	// Unlimited descriptors are never limited and never counted.
	Unlimited bool
	// Name, if set, is reported in current_limit and may be replaced.
	Name string
	// Replaces names the limits this one switches off when both apply
	// to one request.
	Replaces []string
	// ShadowMode limits count and report but answer OK.
	ShadowMode bool
	// QuotaMode limits are reported OK when over the limit (with no
	// time until reset) and never make a request over the limit.
	QuotaMode bool
	// DetailedMetric only changes envoyproxy/ratelimit's statistics names.
	DetailedMetric bool
	// Path is the descriptor's place in the configuration
	// ("domain.key_value.key"), for messages, migration and failure modes.
	Path string
	// scopes are the paths of the descriptor's ancestors below the domain
	// and its own, outermost first: where its failure mode may be set.
	scopes []string
	// File and Line are where the rate_limit is defined.
	File string
	Line int
}

// node is one descriptor level: its children by "key" or "key_value", the
// wildcard children in file order, and its rate limit if any.
type node struct {
	key, value string // as configured; empty for a domain's root
	children   map[string]*node
	order      []string // children's names in file order
	wildcards  []wildcard
	limit      *RateLimit
	// shareThreshold: a wildcard child whose budget is shared by every
	// value it matches.
	shareThreshold bool
	pattern        string // the wildcard value ("files*") when shareThreshold
}

type wildcard struct {
	key    string // the child's "key_value", ending in '*'
	prefix string // key without its '*'
}

// Config is a loaded envoyproxy/ratelimit configuration: every domain's
// descriptor tree. It is immutable and safe for concurrent use.
type Config struct {
	domains map[string]*node
	// paths holds every domain's name and every descriptor's path.
	paths map[string]bool
	// Files are the files it was loaded from, in load order.
	Files []string
	// Limits lists every rate_limit in file order.
	Limits []*RateLimit
}

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// LoadOptions changes how files are combined.
type LoadOptions struct {
	// MergeDomains lets several files configure one domain, their
	// descriptors merged (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG);
	// otherwise a domain configured twice is an error.
	MergeDomains bool
}

// ErrNativeConfig marks a directory holding a tokenlimit (native)
// configuration file among, or instead of, envoyproxy/ratelimit ones.
var ErrNativeConfig = errors.New("not an envoyproxy/ratelimit configuration")

// ConfigFiles lists the *.yaml and *.yml files directly in dir, sorted by
// name, the files Load reads.
func ConfigFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("envoy config: %w", err)
	}
	var files []string
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.Type().IsRegular() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, filepath.Join(dir, e.Name()))
		} else if !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
			// A symlink (Kubernetes ConfigMaps are symlinks): follow it.
			if st, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && st.Mode().IsRegular() {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	return files, nil
}

// Load reads every *.yaml and *.yml file in dir (ConfigFiles) as
// envoyproxy/ratelimit configuration. All errors are reported at once, each
// as "file:line: field: reason". A directory with no such file is an error,
// and so is one holding a tokenlimit configuration (ErrNativeConfig).
func Load(dir string, opts LoadOptions) (*Config, error) {
	files, err := ConfigFiles(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("envoy config %s: no *.yaml or *.yml file in the directory", dir)
	}
	contents := make([]File, len(files))
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("envoy config: %w", err)
		}
		contents[i] = File{Name: f, Data: data}
	}
	return Parse(contents, opts)
}

// File is one configuration file's name (for messages) and content.
type File struct {
	Name string
	Data []byte
}

// Parse loads files in order, as Load does.
func Parse(files []File, opts LoadOptions) (*Config, error) {
	c := &Config{domains: map[string]*node{}, paths: map[string]bool{}}
	var errs []error
	for _, f := range files {
		c.Files = append(c.Files, f.Name)
		p := &parser{file: f.Name, cfg: c, merge: opts.MergeDomains}
		p.parseFile(f.Data)
		errs = append(errs, p.errs...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// parser reads one file, collecting errors.
type parser struct {
	file  string
	cfg   *Config
	merge bool
	errs  []error
}

func (p *parser) errorf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	p.errs = append(p.errs, fmt.Errorf("%s:%d: %s", p.file, line, msg))
}

// nativeFields are top-level fields of tokenlimit's own format.
var nativeFields = []string{"limits", "plans", "api_keys", "timezone", "default_plan", "hash_tag"}

func (p *parser) parseFile(data []byte) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: %w", p.file, err))
		return
	}
	if len(doc.Content) == 0 {
		p.errorf(&doc, "domain", "config file cannot have empty domain (the file is empty)")
		return
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "", "want a mapping with domain and descriptors")
		return
	}
	var domain string
	var descriptors *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "domain":
			domain = p.scalar(v, "domain")
		case "descriptors":
			descriptors = v
		default:
			if slices.Contains(nativeFields, k.Value) {
				p.errs = append(p.errs, fmt.Errorf("%s:%d: %s: this is a tokenlimit configuration file, not an envoyproxy/ratelimit one: %w (load it with --config FILE, or keep the directory to envoyproxy/ratelimit files)", p.file, k.Line, k.Value, ErrNativeConfig))
				return
			}
			p.unknown(k, "", "domain, descriptors")
		}
	}
	if domain == "" {
		p.errorf(root, "domain", "config file cannot have empty domain")
		return
	}
	dom, present := p.cfg.domains[domain]
	if present && !p.merge {
		p.errorf(root, "domain", "duplicate domain %q in config file (set MERGE_DOMAIN_CONFIG=true to merge)", domain)
		return
	}
	if !present {
		dom = &node{children: map[string]*node{}}
		p.cfg.domains[domain] = dom
	}
	p.cfg.paths[domain] = true
	p.descriptors(dom, descriptors, "descriptors", domain+".", nil)
}

func (p *parser) unknown(k *yaml.Node, field, want string) {
	name := k.Value
	if field != "" {
		name = field + "." + k.Value
	}
	p.errorf(k, name, "unknown field (want %s)", want)
}

// scalar is a scalar's text; yaml.v2, which envoyproxy/ratelimit uses,
// turns a number or boolean into its text when a string is wanted.
func (p *parser) scalar(v *yaml.Node, field string) string {
	if v.Kind != yaml.ScalarNode {
		p.errorf(v, field, "want a string")
		return ""
	}
	if v.Tag == "!!null" {
		return ""
	}
	return v.Value
}

func (p *parser) boolean(v *yaml.Node, field string) bool {
	var b bool
	if v.Kind != yaml.ScalarNode || v.Decode(&b) != nil {
		p.errorf(v, field, "want true or false, got %q", v.Value)
	}
	return b
}

// descriptors reads a list of descriptors under parent, whose own path is
// prefix without its final '.', and the paths of whose ancestors below the
// domain, and its own, are scopes.
func (p *parser) descriptors(parent *node, list *yaml.Node, field, prefix string, scopes []string) {
	if list == nil || list.Tag == "!!null" {
		return
	}
	if list.Kind != yaml.SequenceNode {
		p.errorf(list, field, "want a list of descriptors")
		return
	}
	for i, d := range list.Content {
		p.descriptor(parent, d, fmt.Sprintf("%s[%d]", field, i), prefix, scopes)
	}
}

const descriptorFields = "key, value, rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold"

func (p *parser) descriptor(parent *node, d *yaml.Node, field, prefix string, scopes []string) {
	if d.Kind != yaml.MappingNode {
		p.errorf(d, field, "want a descriptor (a mapping with key, value, rate_limit, descriptors)")
		return
	}
	var key, value string
	var rl, children *yaml.Node
	var shadow, quota, detailed, share bool
	for i := 0; i+1 < len(d.Content); i += 2 {
		k, v := d.Content[i], d.Content[i+1]
		f := field + "." + k.Value
		switch k.Value {
		case "key":
			key = p.scalar(v, f)
		case "value":
			value = p.scalar(v, f)
		case "rate_limit":
			rl = v
		case "descriptors":
			children = v
		case "shadow_mode":
			shadow = p.boolean(v, f)
		case "quota_mode":
			quota = p.boolean(v, f)
		case "detailed_metric":
			detailed = p.boolean(v, f)
		case "share_threshold":
			share = p.boolean(v, f)
		case "value_to_metric":
			p.boolean(v, f) // statistics names only
		default:
			p.unknown(k, field, descriptorFields)
		}
	}
	if key == "" {
		p.errorf(d, field+".key", "descriptor has empty key")
		return
	}
	final := key
	if value != "" {
		final += "_" + value
	}
	path := prefix + final
	if _, dup := parent.children[final]; dup {
		p.errorf(d, field, "duplicate descriptor composite key '%s'", path)
		return
	}
	n := &node{key: key, value: value, children: map[string]*node{}}
	p.cfg.paths[path] = true
	scopes = append(slices.Clip(scopes), path)
	if share {
		if !strings.HasSuffix(final, "*") {
			p.errorf(d, field+".share_threshold", "share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", final)
		}
		n.shareThreshold, n.pattern = true, final
	}
	if rl != nil && rl.Tag != "!!null" {
		n.limit = p.rateLimit(rl, field+".rate_limit", path)
		if n.limit != nil {
			n.limit.ShadowMode, n.limit.QuotaMode, n.limit.DetailedMetric = shadow, quota, detailed
			n.limit.scopes = scopes
		}
	}
	if prefix, ok := strings.CutSuffix(final, "*"); ok {
		parent.wildcards = append(parent.wildcards, wildcard{key: final, prefix: prefix})
	}
	parent.children[final] = n
	parent.order = append(parent.order, final)
	p.descriptors(n, children, field+".descriptors", path+".", scopes)
}

func (p *parser) rateLimit(v *yaml.Node, field, path string) *RateLimit {
	if v.Kind != yaml.MappingNode {
		p.errorf(v, field, "want a mapping with unit and requests_per_unit")
		return nil
	}
	rl := &RateLimit{Path: path, File: p.file, Line: v.Line}
	var unitNode *yaml.Node
	var unit string
	nerr := len(p.errs)
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		f := field + "." + k.Value
		switch k.Value {
		case "requests_per_unit":
			if val.Kind != yaml.ScalarNode || val.Decode(&rl.RequestsPerUnit) != nil {
				p.errorf(val, f, "want a whole number from 0 to 4294967295, got %q", val.Value)
			}
		case "unit":
			unitNode, unit = val, p.scalar(val, f)
		case "unlimited":
			rl.Unlimited = p.boolean(val, f)
		case "name":
			rl.Name = p.scalar(val, f)
		case "replaces":
			p.replaces(rl, val, f)
		default:
			p.unknown(k, field, "requests_per_unit, unit, unlimited, name, replaces")
		}
	}
	if rl.Name != "" && slices.Contains(rl.Replaces, rl.Name) {
		p.errorf(v, field+".replaces", "replaces should not contain name of same descriptor (%q)", rl.Name)
	}
	u, valid := parseUnit(unit)
	switch {
	case rl.Unlimited && valid:
		p.errorf(unitNode, field+".unit", "should not specify rate limit unit when unlimited")
	case !rl.Unlimited && !valid:
		at := unitNode
		if at == nil {
			at = v
		}
		p.errorf(at, field+".unit", "invalid rate limit unit '%s' (want second, minute, hour, day, week, month or year)", unit)
	}
	rl.Unit = u
	if rl.Unlimited {
		rl.Unit = UnitUnknown
	}
	if len(p.errs) > nerr {
		return nil
	}
	p.cfg.Limits = append(p.cfg.Limits, rl)
	return rl
}

func (p *parser) replaces(rl *RateLimit, v *yaml.Node, field string) {
	if v.Kind != yaml.SequenceNode {
		p.errorf(v, field, "want a list of {name: NAME}")
		return
	}
	for i, e := range v.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		if e.Kind != yaml.MappingNode {
			p.errorf(e, f, "want {name: NAME}")
			continue
		}
		name := ""
		for j := 0; j+1 < len(e.Content); j += 2 {
			if e.Content[j].Value != "name" {
				p.unknown(e.Content[j], f, "name")
				continue
			}
			name = p.scalar(e.Content[j+1], f+".name")
		}
		if name == "" {
			p.errorf(e, f+".name", "should not have an empty replaces entry")
		}
		rl.Replaces = append(rl.Replaces, name)
	}
}
