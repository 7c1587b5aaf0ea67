package config

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redact"
)

// rawFile is the YAML as written (decode.go reads it, each field by its
// yaml tag); builder validates it into a Config.
type rawFile struct {
	Timezone    string               `yaml:"timezone"`
	DefaultPlan string               `yaml:"default_plan"`
	HashTag     string               `yaml:"hash_tag"`
	Limits      []rawLimit           `yaml:"limits"`
	Plans       map[string]rawPlan   `yaml:"plans"`
	APIKeys     map[string]rawAPIKey `yaml:"api_keys"`
	Prices      map[string]rawPrice  `yaml:"prices"`
	Alerts      rawAlerts            `yaml:"alerts"`
	Stores      map[string]rawStore  `yaml:"stores"`
}

type rawLimit struct {
	Name          string            `yaml:"name"`
	Match         map[string]string `yaml:"match"`
	Key           []string          `yaml:"key"`
	Algorithm     string            `yaml:"algorithm"`
	Unit          string            `yaml:"unit"`
	Limit         string            `yaml:"limit"`
	Capacity      yaml.Node         `yaml:"capacity"`
	Refill        string            `yaml:"refill"`
	Rate          string            `yaml:"rate"`
	MaxBurst      yaml.Node         `yaml:"max_burst"`
	Calendar      string            `yaml:"calendar"`
	Lease         yaml.Node         `yaml:"lease"`
	Cost          yaml.Node         `yaml:"cost"`
	Shadow        bool              `yaml:"shadow"`
	FailureMode   string            `yaml:"failure_mode"`
	FailOpenShare *float64          `yaml:"fail_open_share"`
	LocalCache    bool              `yaml:"local_cache"`
	MaxKeys       *int64            `yaml:"max_keys"`
	RLSOverride   bool              `yaml:"rls_limit_override"`
	OnExhaust     string            `yaml:"on_exhaust"`
	AlertAt       []string          `yaml:"alert_at"`
	Wait          string            `yaml:"wait"`
	MaxWaiting    *int64            `yaml:"max_waiting"`
	Store         string            `yaml:"store"`
}

type rawPlan struct {
	Daily   int64    `yaml:"daily"`
	Monthly int64    `yaml:"monthly"`
	Key     []string `yaml:"key"`
}

type rawAPIKey struct {
	User      string                 `yaml:"user"`
	Tenant    string                 `yaml:"tenant"`
	Plan      string                 `yaml:"plan"`
	Overrides map[string]rawOverride `yaml:"overrides"`
}

type rawOverride struct {
	Limit    string    `yaml:"limit"`
	Capacity yaml.Node `yaml:"capacity"`
	Refill   string    `yaml:"refill"`
	Rate     string    `yaml:"rate"`
	MaxBurst yaml.Node `yaml:"max_burst"`
}

// builder collects every error, each with its file:line and field path.
type builder struct {
	// source names the file in errors; "" leaves out the file and position
	// (a list of limits sent in a request body).
	source string
	// doc is the document's top node (a mapping, when the file is right).
	doc  *yaml.Node
	errs []lineError
	// wrongAt holds the paths whose values were reported wrong (of the wrong
	// type, or unreadable): no second error is reported about them or what
	// they hold, such as that they are missing.
	wrongAt map[string]bool
	// misspelt holds the paths of fields given under a misspelt name (an
	// unknown field is near theirs): saying that they are missing (or that
	// an empty algorithm is unknown) would only bury the typo.
	misspelt map[string]bool
	// index holds the children of the large mappings b.child looked in.
	index map[*yaml.Node]map[string]*yaml.Node
	// compile compiles cost expressions; nil refuses them.
	compile Compiler
}

// lineError is one error and the line it is about, which orders errors.
type lineError struct {
	line int
	msg  string
}

func (e lineError) Error() string { return e.msg }

// err returns every error recorded, in line order (errors about one line
// in the order they were found), or nil.
func (b *builder) err() error {
	if len(b.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(b.errs, func(x, y lineError) int { return x.line - y.line })
	errs := make([]error, len(b.errs))
	for i, e := range b.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// fail records an error at the node found by path (a mix of map keys and
// list indexes), or at the closest ancestor that exists, unless that value
// or one holding it was reported wrong already.
func (b *builder) fail(path []any, format string, args ...any) {
	if b.isWrong(path) {
		return
	}
	n, inFlow := b.locate(path)
	b.record(n, inFlow, path, format, args...)
}

// failAt records an error at node n (a key the path cannot find, such as
// a repeated one, or a value of the wrong type), whose path is path.
func (b *builder) failAt(n *yaml.Node, path []any, format string, args ...any) {
	parent, inFlow := b.locate(path[:max(len(path)-1, 0)])
	b.record(n, inFlow || parent.Style&yaml.FlowStyle != 0, path, format, args...)
}

// wrong records an error about the value at path, and that nothing more is
// to be said about it.
func (b *builder) wrong(path []any, format string, args ...any) {
	b.fail(path, format, args...)
	b.wrongAt[pathString(path)] = true
}

// isWrong reports whether the value at path, or one holding it, was
// reported wrong.
func (b *builder) isWrong(path []any) bool {
	for i := len(path); i > 0; i-- {
		if b.wrongAt[pathString(path[:i])] {
			return true
		}
	}
	return false
}

// record writes file:line: path: reason, with the column after the line
// when the node is inside a flow collection ({a: 1, b: 2} or [a, b]),
// where a line holds several fields.
func (b *builder) record(n *yaml.Node, inFlow bool, path []any, format string, args ...any) {
	var where string
	switch {
	case b.source == "": // no file: the path says where
	case inFlow:
		where = fmt.Sprintf("%s:%d:%d: ", b.source, n.Line, n.Column)
	default:
		where = fmt.Sprintf("%s:%d: ", b.source, n.Line)
	}
	if len(path) > 0 {
		where += pathString(path) + ": "
	}
	b.errs = append(b.errs, lineError{line: n.Line, msg: where + fmt.Sprintf(format, args...)})
}

// lineOf returns the line of the node at path, or of its closest ancestor.
func (b *builder) lineOf(path []any) int {
	n, _ := b.locate(path)
	return n.Line
}

// locate returns the node at path, or its closest ancestor that exists, and
// whether that node is inside a flow collection.
func (b *builder) locate(path []any) (n *yaml.Node, inFlow bool) {
	n = b.doc
	for _, p := range path {
		next := b.child(n, p)
		if next == nil {
			break
		}
		inFlow = inFlow || n.Style&yaml.FlowStyle != 0
		n = next
	}
	return n, inFlow
}

// keysInOrder returns the keys of the mapping at path in file order, once
// each, so that errors about a map's entries come out in a stable, readable
// order.
func (b *builder) keysInOrder(path []any) []string {
	n := b.doc
	for _, p := range path {
		if n = b.child(n, p); n == nil {
			return nil
		}
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	var keys []string
	seen := map[string]bool{}
	for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// indexAbove is the number of entries past which a mapping's children are
// found through an index (b.child) rather than a scan: api_keys may hold
// 100,000 keys, each looked up by path.
const indexAbove = 16

// child is child for the document b reads: the children of a large mapping
// are indexed once, the first of a repeated key winning as in child.
func (b *builder) child(n *yaml.Node, p any) *yaml.Node {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	key, ok := p.(string)
	if !ok || n.Kind != yaml.MappingNode || len(n.Content) <= 2*indexAbove {
		return child(n, p)
	}
	idx, ok := b.index[n]
	if !ok {
		idx = make(map[string]*yaml.Node, len(n.Content)/2)
		for i := len(n.Content) - 2; i >= 0; i -= 2 {
			idx[n.Content[i].Value] = n.Content[i+1]
		}
		if b.index == nil {
			b.index = map[*yaml.Node]map[string]*yaml.Node{}
		}
		b.index[n] = idx
	}
	return idx[key]
}

func child(n *yaml.Node, p any) *yaml.Node {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch key := p.(type) {
	case string:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1]
			}
		}
	case int:
		if n.Kind == yaml.SequenceNode && key < len(n.Content) {
			return n.Content[key]
		}
	}
	return nil
}

// pathString writes a path as limits[1].refill. An api key, which is a
// secret, is shown only as a hint: api_keys[sk-l…(24 bytes)].plan.
func pathString(path []any) string {
	var sb strings.Builder
	for i, p := range path {
		switch v := p.(type) {
		case int:
			fmt.Fprintf(&sb, "[%d]", v)
		case string:
			if i > 0 && path[i-1] == "api_keys" {
				fmt.Fprintf(&sb, "[%s]", redact.Hint(v))
				continue
			}
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(v)
		}
	}
	return sb.String()
}

func at(path []any, more ...any) []any {
	return append(slices.Clip(path), more...)
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

func (b *builder) build(raw *rawFile) *Config {
	cfg := &Config{Location: time.UTC, APIKeys: map[string]Identity{}, DefaultPlan: raw.DefaultPlan, HashTag: raw.HashTag}
	if raw.HashTag != "" && (len(raw.HashTag) > 64 || strings.ContainsAny(raw.HashTag, "{}|=")) {
		b.fail([]any{"hash_tag"}, "want a descriptor name such as tenant or api_key, got %q", raw.HashTag)
	}
	if raw.Timezone != "" {
		loc, err := time.LoadLocation(raw.Timezone)
		if err != nil {
			b.fail([]any{"timezone"}, "unknown time zone %q", raw.Timezone)
		} else {
			cfg.Location = loc
		}
	}
	cfg.Stores = b.stores(raw.Stores)
	names := map[string]int{}
	for i := range raw.Limits {
		path := []any{"limits", i}
		l, ok := b.limit(path, &raw.Limits[i])
		b.storeOf(path, raw.Limits[i].Store, cfg.Stores, &l)
		if !ok {
			continue
		}
		if j, dup := names[l.Name]; dup {
			b.fail(at(path, "name"), "%q is already the name of limits[%d]", l.Name, j)
			continue
		}
		names[l.Name] = i
		l.Line = b.lineOf(path)
		cfg.Limits = append(cfg.Limits, l)
	}
	cfg.Limits = append(cfg.Limits, b.plans(raw.Plans, names)...)
	cfg.Prices = b.prices(raw.Prices)
	cfg.Alerts = b.alerts(raw.Alerts)
	if raw.DefaultPlan != "" {
		if _, ok := raw.Plans[raw.DefaultPlan]; !ok {
			b.fail([]any{"default_plan"}, "no plan named %q under plans", raw.DefaultPlan)
		}
	}
	for _, key := range sortedKeys(raw.APIKeys) {
		cfg.APIKeys[key] = b.apiKey([]any{"api_keys", key}, raw.APIKeys[key], raw.Plans, cfg.Limits)
	}
	if len(cfg.Limits) == 0 && len(b.errs) == 0 {
		b.fail(nil, "no limits: add at least one under limits or plans")
	}
	return cfg
}

// algorithmNames lists, for errors, the algorithms a limit can name.
const algorithmNames = "fixed_window, sliding_log, sliding_counter, token_bucket, gcra, concurrency"

func (b *builder) limit(path []any, r *rawLimit) (Limit, bool) {
	before := len(b.errs)
	l := Limit{Name: r.Name, Key: r.Key, Shadow: r.Shadow, FailOpen: true, FailOpenShare: 1}
	if !namePattern.MatchString(r.Name) {
		b.fail(at(path, "name"), "want 1-63 lowercase letters, digits, '_', '-' or '.', starting with a letter or digit; got %q", r.Name)
	}
	l.Match = map[string]Pattern{}
	for _, d := range b.keysInOrder(at(path, "match")) {
		if r.Match[d] == "" {
			b.fail(at(path, "match", d), "empty value: use \"*\" to match any value")
		}
		l.Match[d] = Pattern(r.Match[d])
	}
	for i, d := range r.Key {
		if d == "" || slices.Index(r.Key, d) != i {
			b.fail(at(path, "key", i), "want distinct, non-empty descriptor names, got %q", d)
		}
	}
	usd := b.unit(path, r)
	if r.Algorithm == "concurrency" {
		b.concurrency(path, r, &l)
	} else if r.Algorithm == "" && b.misspelt[pathString(at(path, "algorithm"))] {
		// The unknown field is most likely the algorithm, misspelt.
	} else if r.Algorithm == "" {
		b.fail(at(path, "algorithm"), "missing: want one of %s", algorithmNames)
	} else if alg, err := tokenlimit.ParseAlgorithm(r.Algorithm); err != nil {
		b.fail(at(path, "algorithm"), "unknown algorithm %q (want one of %s)", r.Algorithm, algorithmNames)
	} else {
		l.Limit = b.params(path, alg, b.rawParams(path, usd, r.Limit, &r.Capacity, r.Refill, r.Rate, &r.MaxBurst))
		l.Cost = b.cost(at(path, "cost"), &r.Cost)
		if usd {
			l.Cost = Cost{Spend: true}
		}
		b.logCap(path, l)
	}
	switch r.FailureMode {
	case "", "open":
	case "closed":
		l.FailOpen = false
	default:
		b.fail(at(path, "failure_mode"), "want open or closed, got %q", r.FailureMode)
	}
	if r.FailOpenShare != nil {
		if s := *r.FailOpenShare; s <= 0 || s > 1 {
			b.fail(at(path, "fail_open_share"), "want a share in (0, 1], got %v", s)
		} else {
			l.FailOpenShare = s
		}
	}
	b.localCache(path, r, &l)
	b.maxKeys(path, r, &l)
	b.calendar(path, r, &l)
	b.rlsOverride(path, r, &l)
	b.onExhaust(path, r, &l)
	b.alertAt(path, r, &l)
	b.wait(path, r, &l)
	if r.Algorithm != "concurrency" {
		b.lease(path, r, &l, usd)
	}
	return l, len(b.errs) == before
}

// rawLease is a limit's lease: {size: N, ttl: DURATION}; a usd budget's
// size is in decimal dollars, as its other amounts.
type rawLease struct {
	Size yaml.Node `yaml:"size"`
	TTL  string    `yaml:"ttl"`
}

// lease applies lease, the terms on which replicas lease the budget
// (tokenlimit.Lease), once the limit's other fields are read; usd says the
// budget is in dollars.
func (b *builder) lease(path []any, r *rawLimit, l *Limit, usd bool) {
	path = at(path, "lease")
	switch {
	case r.Lease.Kind == 0:
		return
	case r.Lease.Kind != yaml.MappingNode:
		b.fail(path, "want {size: N, ttl: DURATION}, such as {size: 100, ttl: 5s}")
		return
	}
	var raw rawLease
	b.decode(path, &r.Lease, &raw)
	var terms tokenlimit.Lease
	size, sized := b.amount(at(path, "size"), &raw.Size, usd)
	if !sized {
		b.fail(at(path, "size"), "missing: the cost one lease takes from the budget, such as 100")
	}
	terms.Size = size
	if raw.TTL == "" {
		b.fail(at(path, "ttl"), "missing: how long a lease decides calls, such as 5s")
	} else if d, err := time.ParseDuration(raw.TTL); err != nil {
		b.fail(at(path, "ttl"), "want a duration such as 500ms or 5s, got %q", raw.TTL)
	} else {
		terms.TTL = d
	}
	if !sized || terms.TTL == 0 {
		return
	}
	switch {
	case r.Shadow:
		b.fail(path, "a shadow limit is only reported: there is nothing to decide from a lease")
	case len(l.AlertAt) > 0:
		b.fail(path, "alert_at names the request that crosses a threshold, and a leased budget is charged a lease at a time: use one or the other")
	case l.RLSOverride:
		b.fail(path, "rls_limit_override gives each request its own limit, and a lease is taken on one")
	}
	window := leaseWindow(l)
	if err := terms.Validate(window); err != nil {
		var fe *tokenlimit.FieldError
		if errors.As(err, &fe) {
			field := at(path[:len(path)-1])
			for _, name := range strings.Split(fe.Field, ".") {
				field = append(field, name)
			}
			reason := fe.Reason
			if usd && fe.Field == "lease.size" { // the same bound, in the budget's dollars
				reason = fmt.Sprintf("must be more than $0 and at most the limit's capacity $%s, got $%s", FormatUSD(window.Capacity()), FormatUSD(terms.Size))
			}
			b.fail(field, "%s", reason)
		}
		return
	}
	l.Lease = terms
}

// leaseWindow is the limit a lease's terms are checked against: a
// calendar limit's shortest window (a day of 23 hours, a month of 28
// days), otherwise the limit itself.
func leaseWindow(l *Limit) tokenlimit.Limit {
	limit := l.Limit
	switch l.Calendar {
	case Day:
		limit.Period = 23 * time.Hour
	case Month:
		limit.Period = 28 * 24 * time.Hour
	}
	return limit
}

// onExhaust applies on_exhaust, what a stream does once the budget cannot
// pay for more of it: only a budget in tokens or usd has a say.
func (b *builder) onExhaust(path []any, r *rawLimit, l *Limit) {
	switch {
	case r.OnExhaust == "":
	case l.Concurrency || l.Cost.Constant > 0 || l.Cost.By != "":
		b.fail(at(path, "on_exhaust"), "only a budget in tokens or usd stops streams; this limit counts requests")
	case l.Cost.Class == InputTokens || l.Cost.Class == UncachedInputTokens:
		b.fail(at(path, "on_exhaust"), "a budget of input tokens has no stream to stop: a stream's output costs it nothing")
	case r.OnExhaust == "finish":
		l.OnExhaust = Finish
	case r.OnExhaust != "stop":
		b.fail(at(path, "on_exhaust"), "want stop or finish, got %q", r.OnExhaust)
	}
}

// rlsOverride applies rls_limit_override, which lets an RLS descriptor's
// limit override (N per unit) replace the limit's quota and period: only
// for a limit whose budget is a plain quota over a period.
func (b *builder) rlsOverride(path []any, r *rawLimit, l *Limit) {
	switch {
	case !r.RLSOverride:
	case r.Algorithm == "concurrency":
		b.fail(at(path, "rls_limit_override"), "a concurrency limit counts requests in flight, not requests per unit")
	case r.Calendar != "" || l.Calendar != NoCalendar:
		b.fail(at(path, "rls_limit_override"), "a calendar limit's period is the calendar's day or month, not a unit the request names")
	case l.Cost.Spend:
		b.fail(at(path, "rls_limit_override"), "a usd budget is in dollars, not requests per unit")
	default:
		l.RLSOverride = true
	}
}

// MaxKeysBound is the largest max_keys: each replica tracks up to that
// many live keys of the limit in memory.
const MaxKeysBound = 10_000_000

// maxKeys applies max_keys, the bound on a limit's live keys.
func (b *builder) maxKeys(path []any, r *rawLimit, l *Limit) {
	switch n := r.MaxKeys; {
	case n == nil:
	case *n < 1 || *n > MaxKeysBound:
		b.fail(at(path, "max_keys"), "want a whole number of live keys from 1 to %d, got %d", MaxKeysBound, *n)
	case len(r.Key) == 0:
		b.fail(at(path, "max_keys"), "bounds the budgets of distinct key values, and this limit has no key: it is one budget")
	default:
		l.MaxKeys = int(*n)
	}
}

// MaxWait is the longest wait a limit may take: a caller held longer is
// better told to come back (429 with its retry-after).
const MaxWait = time.Minute

// DefaultMaxWaiting is a limit's max_waiting when it has a wait and sets
// none; MaxWaitingBound is the largest max_waiting.
const (
	DefaultMaxWaiting = 100
	MaxWaitingBound   = 100_000
)

// wait applies wait and max_waiting: how long a denied request may be held
// for its budget to refill, and how many may be held per budget.
func (b *builder) wait(path []any, r *rawLimit, l *Limit) {
	if r.Wait != "" {
		switch d, err := time.ParseDuration(r.Wait); {
		case err != nil || d <= 0 || d > MaxWait:
			b.fail(at(path, "wait"), "want a duration above 0 and at most %gs, such as 500ms or 2s; got %q", MaxWait.Seconds(), r.Wait)
		case r.Shadow:
			b.fail(at(path, "wait"), "a shadow limit never denies: there is nothing to wait for")
		case r.Algorithm == "concurrency":
			b.fail(at(path, "wait"), "a concurrency slot comes back when a request ends, not at a time a wait could be set for")
		default:
			l.Wait, l.MaxWaiting = d, DefaultMaxWaiting
		}
	}
	switch n := r.MaxWaiting; {
	case n == nil:
	case r.Wait == "":
		b.fail(at(path, "max_waiting"), "bounds the requests waiting under wait, and this limit has no wait")
	case *n < 1 || *n > MaxWaitingBound:
		b.fail(at(path, "max_waiting"), "want a whole number of waiting requests per budget from 1 to %d, got %d", MaxWaitingBound, *n)
	case l.Wait > 0:
		l.MaxWaiting = int(*n)
	}
}

// localCache applies local_cache, which only a limit that denies and that
// nothing but a refund reopens early can use.
func (b *builder) localCache(path []any, r *rawLimit, l *Limit) {
	switch {
	case !r.LocalCache:
	case r.Shadow:
		b.fail(at(path, "local_cache"), "a shadow limit never denies: there is no denial to cache")
	case r.Algorithm == "concurrency":
		b.fail(at(path, "local_cache"), "a concurrency limit reopens whenever a request ends: a cached denial would deny requests it should admit")
	default:
		l.LocalCache = true
	}
}

// logCap refuses a sliding log that cannot honour its limit: it keeps one
// entry per admitted request, at most tokenlimit.MaxLogEntries, so requests
// of the smallest cost the limit charges must fill the limit within them.
func (b *builder) logCap(path []any, l Limit) {
	if l.Limit.Algorithm != tokenlimit.SlidingLog {
		return
	}
	least := l.Cost.Least()
	if l.Limit.Quota <= tokenlimit.MaxLogEntries*least {
		return
	}
	what := "requests"
	if least > 1 {
		what = fmt.Sprintf("requests of cost %d", least)
	}
	b.fail(at(path, "limit"), "a sliding_log keeps one entry per request, at most %d, so it can admit at most %d %s per window, not %d; use sliding_counter (any limit, approximate), fixed_window, or a smaller limit",
		tokenlimit.MaxLogEntries, tokenlimit.MaxLogEntries, what, l.Limit.Quota/least)
}

// DefaultLease is how long a concurrency slot is held when its holder never
// releases it (a crash).
const DefaultLease = 10 * time.Minute

// concurrency reads a limit on requests in flight: limit is a count, lease
// a duration.
func (b *builder) concurrency(path []any, r *rawLimit, l *Limit) {
	n, err := strconv.ParseInt(r.Limit, 10, 64)
	if err != nil || n <= 0 || n > tokenlimit.MaxLogEntries {
		b.fail(at(path, "limit"), "a concurrency limit is a count of requests in flight, 1..%d; got %q", tokenlimit.MaxLogEntries, r.Limit)
	}
	lease := DefaultLease
	switch {
	case r.Lease.Kind == 0:
	case r.Lease.Kind != yaml.ScalarNode:
		b.fail(at(path, "lease"), "a concurrency limit's lease is how long a slot is held when its holder never releases it, a period such as 10m")
	default:
		if lease, err = ParsePeriod(r.Lease.Value); err != nil {
			b.fail(at(path, "lease"), "%v", err)
		}
	}
	for _, f := range []struct {
		name  string
		given bool
	}{{"capacity", r.Capacity.Kind != 0}, {"refill", r.Refill != ""}, {"rate", r.Rate != ""}, {"max_burst", r.MaxBurst.Kind != 0}, {"cost", r.Cost.Kind != 0}} {
		if f.given {
			b.fail(at(path, f.name), "a concurrency limit takes limit and lease, not %s", f.name)
		}
	}
	l.Concurrency = true
	l.Limit = tokenlimit.SlidingLogLimit(n, lease)
	l.Cost = Cost{Constant: 1}
	if err := l.Limit.Validate(); n > 0 && err != nil {
		b.fail(at(path, "lease"), "%v", err)
	}
}

// calendar applies calendar, and the calendar a fixed window's limit
// names as its period: N/month is the calendar month (a month has no
// fixed length), which calendar: month also takes as N/day (the older
// spelling); calendar: day takes N/day. Any other period under a calendar
// is a mismatch, refused naming limit.
func (b *builder) calendar(path []any, r *rawLimit, l *Limit) {
	c, err := ParseCalendar(r.Calendar)
	if err != nil {
		b.fail(at(path, "calendar"), "want day or month, got %q", r.Calendar)
		return
	}
	for _, f := range []struct{ name, rate string }{{"refill", r.Refill}, {"rate", r.Rate}} {
		if isMonthly(f.rate) {
			b.fail(at(path, f.name), "%s", notAMonth)
		}
	}
	month := isMonthly(r.Limit)
	switch fixed := l.Limit.Algorithm == tokenlimit.FixedWindow; {
	case month && !fixed && !l.Concurrency:
		b.fail(at(path, "limit"), "%s", notAMonth)
	case c != NoCalendar && !fixed:
		b.fail(at(path, "calendar"), "only a fixed_window can follow the calendar, not %s", l.Limit.Algorithm)
	case month && c == Day:
		b.fail(at(path, "limit"), "calendar: day counts per calendar day, not per month: want N/day, or calendar: month; got %q", r.Limit)
	case month:
		c = Month
	case c != NoCalendar && l.Limit.Period != 0 && l.Limit.Period != 24*time.Hour:
		b.fail(at(path, "limit"), "calendar: %s counts per calendar %s: want N/%s, got %q", c, c, c, r.Limit)
	case c == Month && l.Limit.Period != 0:
		l.Limit.Period = monthPeriod // one month's budget, however it was spelt
	}
	l.Calendar = c
}

// monthPeriod is the period a calendar month's quota is validated with: its
// longest month. The service gives each month its own length.
const monthPeriod = 31 * 24 * time.Hour

// notAMonth is the error of a month where a fixed length is needed.
const notAMonth = "a month has no fixed length: only a fixed_window's limit can be N/month (the calendar month); use 30d for 30 days"

type rawParams struct {
	limit    string
	capacity int64
	refill   string
	rate     string
	maxBurst *int64
}

// params turns the algorithm's parameters into an engine limit, checking
// that exactly the right ones are given.
func (b *builder) params(path []any, alg tokenlimit.Algorithm, p rawParams) tokenlimit.Limit {
	given := map[string]bool{"limit": p.limit != "", "capacity": p.capacity != 0, "refill": p.refill != "", "rate": p.rate != "", "max_burst": p.maxBurst != nil}
	for f := range given {
		given[f] = given[f] || b.wrongAt[pathString(at(path, f))]
	}
	if p.capacity < 0 {
		b.fail(at(path, "capacity"), "want a positive whole number, got %d", p.capacity)
		return tokenlimit.Limit{}
	}
	if p.maxBurst != nil && *p.maxBurst < 0 {
		b.fail(at(path, "max_burst"), "must not be negative, got %d", *p.maxBurst)
		return tokenlimit.Limit{}
	}
	var want []string
	var l tokenlimit.Limit
	switch alg {
	case tokenlimit.TokenBucket:
		want = []string{"capacity", "refill"}
		n, per := b.rate(at(path, "refill"), p.refill)
		l = tokenlimit.TokenBucketLimit(p.capacity, n, per)
	case tokenlimit.GCRA:
		want = []string{"rate", "max_burst"}
		n, per := b.rate(at(path, "rate"), p.rate)
		burst := int64(0)
		if p.maxBurst != nil {
			burst = *p.maxBurst
		}
		l = tokenlimit.GCRALimit(burst, n, per)
	default:
		want = []string{"limit"}
		n, per := b.rate(at(path, "limit"), p.limit)
		l = tokenlimit.Limit{Algorithm: alg, Quota: n, Period: per}
	}
	for _, f := range []string{"limit", "capacity", "refill", "rate", "max_burst"} {
		switch wanted := slices.Contains(want, f); {
		case wanted && !given[f] && !b.misspelt[pathString(at(path, f))]:
			b.fail(at(path, f), "%s needs %s", alg, strings.Join(want, " and "))
		case !wanted && given[f]:
			b.fail(at(path, f), "%s takes %s, not %s", alg, strings.Join(want, " and "), f)
		}
	}
	if l.Quota > 0 && l.Period > 0 && (alg != tokenlimit.TokenBucket || p.capacity != 0) {
		if err := l.Validate(); err != nil {
			b.fail(at(path, fieldOf(err, alg)), "%v", err)
		}
	}
	return l
}

// fieldOf maps an engine FieldError's field to the configuration's name.
func fieldOf(err error, alg tokenlimit.Algorithm) string {
	field := strings.SplitN(err.Error(), ":", 2)[0]
	switch {
	case alg == tokenlimit.TokenBucket && field == "burst":
		return "capacity"
	case alg == tokenlimit.TokenBucket:
		return "refill"
	case alg == tokenlimit.GCRA && field == "burst":
		return "max_burst"
	case alg == tokenlimit.GCRA:
		return "rate"
	}
	return "limit"
}

func (b *builder) rate(path []any, s string) (int64, time.Duration) {
	if s == "" {
		return 0, 0
	}
	if isMonthly(s) {
		// The calendar month's quota, validated over its longest month
		// (calendar says which limits may take it).
		num, _, _ := strings.Cut(s, "/")
		s = num + "/" + monthPeriod.String()
	}
	if periodOf(s) == "week" {
		b.fail(path, "there is no calendar week: use 7d for windows of 7 days (from the Unix epoch's Thursday, 00:00 UTC), got %q", s)
		return 0, 0
	}
	n, per, err := ParseRate(s)
	if err != nil {
		b.fail(path, "%v", err)
	}
	return n, per
}

// periodOf returns the period of the rate s, N/period, trimmed; "" when s
// has no '/'.
func periodOf(s string) string {
	_, per, _ := strings.Cut(s, "/")
	return strings.TrimSpace(per)
}

// isMonthly reports whether the rate s is N/month: N per calendar month.
func isMonthly(s string) bool { return periodOf(s) == "month" }

// costForms lists, for errors, the forms a cost takes.
const costForms = `a positive whole number, "request", input_tokens, uncached_input_tokens, output_tokens, total_tokens, {expr: "..."} or {by, weights, default}`

// cost reads a cost: absent (the request's own cost), "request", a token
// class, a positive integer, or a mapping (exprCost, weightedCost). Each
// form is read in one place.
func (b *builder) cost(path []any, n *yaml.Node) Cost {
	switch n.Kind {
	case 0:
		return Cost{}
	case yaml.ScalarNode:
		if n.Value == "request" {
			return Cost{}
		}
		if class, ok := classOf(n.Value); ok {
			return Cost{Class: class}
		}
		c, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil || c <= 0 || c > tokenlimit.MaxCost {
			b.fail(path, "want %s; got %q", costForms, n.Value)
		}
		return Cost{Constant: c}
	case yaml.MappingNode:
		if child(n, "expr") != nil {
			return b.exprCost(path, n)
		}
		return b.weightedCost(path, n)
	}
	b.fail(path, "want %s", costForms)
	return Cost{}
}

// rawWeightedCost is a cost as a mapping: each value of the descriptor By
// costs its weight, any other value Default.
type rawWeightedCost struct {
	By      string           `yaml:"by"`
	Weights map[string]int64 `yaml:"weights"`
	Default int64            `yaml:"default"`
}

// weightedCost reads {by, weights, default}; default is 1 when absent.
func (b *builder) weightedCost(path []any, n *yaml.Node) Cost {
	var raw rawWeightedCost
	b.decode(path, n, &raw)
	if raw.By == "" && !b.misspelt[pathString(at(path, "by"))] {
		b.fail(at(path, "by"), "name the descriptor whose value picks the weight, such as route or model")
	}
	for _, v := range b.keysInOrder(at(path, "weights")) {
		if w := raw.Weights[v]; w <= 0 || w > tokenlimit.MaxCost {
			b.fail(at(path, "weights", v), "want a positive whole number, got %d", w)
		}
	}
	if raw.Default < 0 {
		b.fail(at(path, "default"), "must not be negative, got %d", raw.Default)
	}
	if raw.Default == 0 {
		raw.Default = 1
	}
	return Cost{By: raw.By, Weights: raw.Weights, Default: raw.Default}
}

// plans turns each plan's daily and monthly token quotas into calendar
// fixed windows named plan-<plan>-daily and plan-<plan>-monthly.
func (b *builder) plans(plans map[string]rawPlan, names map[string]int) []Limit {
	var out []Limit
	for _, name := range sortedKeys(plans) {
		p := plans[name]
		path := []any{"plans", name}
		if !namePattern.MatchString(name) {
			b.fail(path, "plan names follow the rules of limit names; got %q", name)
			continue
		}
		key := p.Key
		if len(key) == 0 {
			key = []string{"api_key"}
		}
		if p.Daily == 0 && p.Monthly == 0 && !b.wrongAt[pathString(at(path, "daily"))] && !b.wrongAt[pathString(at(path, "monthly"))] {
			b.fail(path, "a plan needs a daily or a monthly quota")
		}
		for _, q := range []struct {
			field    string
			calendar Calendar
			quota    int64
			period   time.Duration
		}{{"daily", Day, p.Daily, 24 * time.Hour}, {"monthly", Month, p.Monthly, monthPeriod}} {
			if q.quota == 0 {
				continue
			}
			if q.quota < 0 || q.quota > tokenlimit.MaxQuota {
				b.fail(at(path, q.field), "want a positive whole number of tokens, got %d", q.quota)
				continue
			}
			l := Limit{
				Name:     "plan-" + name + "-" + q.field,
				Match:    map[string]Pattern{"plan": Pattern(name)},
				Key:      key,
				Limit:    tokenlimit.FixedWindowLimit(q.quota, q.period),
				Calendar: q.calendar, FailOpen: true, FailOpenShare: 1,
			}
			if _, dup := names[l.Name]; dup {
				b.fail(at(path, q.field), "the generated limit %q clashes with a limit of that name", l.Name)
				continue
			}
			out = append(out, l)
		}
	}
	return out
}

func (b *builder) apiKey(path []any, k rawAPIKey, plans map[string]rawPlan, limits []Limit) Identity {
	id := Identity{User: k.User, Tenant: k.Tenant, Plan: k.Plan, Overrides: map[string]tokenlimit.Limit{}}
	if k.Plan != "" {
		if _, ok := plans[k.Plan]; !ok {
			b.fail(at(path, "plan"), "no plan named %q under plans", k.Plan)
		}
	}
	for _, name := range b.keysInOrder(at(path, "overrides")) {
		o := k.Overrides[name]
		i := slices.IndexFunc(limits, func(l Limit) bool { return l.Name == name })
		if i < 0 {
			b.fail(at(path, "overrides", name), "no limit named %q", name)
			continue
		}
		opath := at(path, "overrides", name)
		id.Overrides[name] = b.params(opath, limits[i].Limit.Algorithm, b.rawParams(opath, limits[i].Cost.Spend, o.Limit, &o.Capacity, o.Refill, o.Rate, &o.MaxBurst))
	}
	return id
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
