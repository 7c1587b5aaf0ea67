// Package config reads tokenlimit's YAML configuration into validated limits.
// Every error names the file, the line, the field and the reason, such as
//
//	limits.yaml:12: limits[1].refill: want N/period such as 2/s, got "fast"
//
// with the column after the line inside a flow collection ({a: 1, b: 2}).
// Every error is reported, in line order. Positions come from the YAML
// document's nodes (decode.go walks them); unknown fields (with the nearest
// known one when it looks like a typo) and repeated keys are errors, not
// ignored. The format is documented in docs/config.md; examples/ holds
// ready files.
package config

import (
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tokenlimit/tokenlimit"
)

// Config is a validated configuration. Build it with Load or Parse.
type Config struct {
	// Limits in file order, plans' quotas appended after them.
	Limits []Limit
	// Location is the time zone of calendar quotas (UTC by default).
	Location *time.Location
	// APIKeys maps an api key to the identity it stands for.
	APIKeys map[string]Identity
	// DefaultPlan is the plan of requests that name none ("" for none).
	DefaultPlan string
	// HashTag, if not empty, names the descriptor that groups a request's
	// budgets on Redis Cluster: every limit keyed by it gets its value as
	// the key's hash tag, so the limits of one request that share it are
	// decided in one atomic script on one node.
	HashTag string
	// Prices are the models' prices, by model name or pattern (see
	// PriceOf), for limits counting US dollars.
	Prices map[Pattern]Price
	// Alerts says where the warnings of limits with AlertAt go.
	Alerts Alerts
	// Stores are the named remote stores (stores:), by name, which limits
	// select with Limit.Store; empty when the file names none.
	Stores map[string]Store
	// Source is the file the configuration came from, for messages.
	Source string
}

// Identity is what an api key stands for: descriptors added to every request
// that carries it, and per-limit overrides.
type Identity struct {
	User, Tenant, Plan string
	// Overrides replaces, for this key only, the parameters of the named
	// limits (the algorithm stays the same).
	Overrides map[string]tokenlimit.Limit
}

// Limit is one configured limit.
type Limit struct {
	// Name identifies the limit in answers, metrics and keys.
	Name string
	// Match selects the requests the limit applies to: every descriptor
	// named must be present and match (see Pattern). Empty matches all.
	Match map[string]Pattern
	// Key lists the descriptors whose values form the budget's key; a
	// request lacking one of them is not subject to the limit.
	Key []string
	// Limit is the engine's limit.
	Limit tokenlimit.Limit
	// Cost says what a request costs under this limit.
	Cost Cost
	// Shadow limits are evaluated and reported but never deny.
	Shadow bool
	// FailOpen: while the store is failing, allow and count locally (true)
	// or deny with 503 (false).
	FailOpen bool
	// FailOpenShare is the share of the limit one replica admits locally
	// while the store is failing, in (0, 1].
	FailOpenShare float64
	// LocalCache makes each replica answer a budget that the store denied
	// with a retry-after R locally, denied, until R has passed, for the same
	// or a larger cost, without a store call: it never over-admits; it may
	// over-deny, for at most R, when a refund or reset elsewhere reopens the
	// budget early. Not for shadow or concurrency limits.
	LocalCache bool
	// MaxKeys, if not 0, bounds the limit's live keys in each replica:
	// beyond MaxKeys keys with budget still held, requests with a new key
	// value share one overflow budget of the limit (still limited), counted
	// in tokenlimit_key_overflow_total. 1..MaxKeysBound.
	MaxKeys int
	// RLSOverride lets the limit field of an Envoy RLS descriptor
	// (requests_per_unit per unit) replace the limit's quota and period
	// for the requests that descriptor makes; false (the default) ignores
	// it, so that a client cannot raise its own limit. Not for concurrency,
	// calendar or usd limits.
	RLSOverride bool
	// Concurrency marks a limit on requests in flight: Limit is a sliding
	// log whose window is the lease (a crashed holder's slot comes back when
	// its lease ends), each reservation takes 1 and settling releases it.
	Concurrency bool
	// Lease, when on, lets each replica decide the limit's calls from a
	// share of its budget leased from the store (see resilient): not for
	// concurrency, sliding or shadow limits.
	Lease tokenlimit.Lease
	// Calendar, if not NoCalendar, aligns the limit's window to calendar
	// days or months in Config.Location.
	Calendar Calendar
	// OnExhaust says what the LLM proxy does with a stream whose output
	// passes its reservation when this budget, in tokens or usd, cannot pay
	// for more: Stop it (the default) or let it Finish and charge it past
	// the limit. Other limits never stop a stream.
	OnExhaust OnExhaust
	// AlertAt lists, ascending, the percentages of the budget's use that
	// raise a warning when a request crosses them (once per threshold, per
	// budget and per window across replicas); empty for none.
	AlertAt []int
	// Wait, if not 0, is how long a request this limit denies may be held
	// for its budget to refill instead of being refused: one whose
	// retry-after is within Wait waits that long and is decided again
	// (see the service). At most MaxWait.
	Wait time.Duration
	// MaxWaiting is how many requests may wait at once per budget (key)
	// in each replica, 1..MaxWaitingBound (DefaultMaxWaiting when wait is
	// set without it); those beyond are refused at once. 0 without Wait.
	MaxWaiting int
	// Store names the entry of Config.Stores where the limit's budgets
	// live; "" for the main store (MainStore).
	Store string
	// Line is where the limit is defined (0 for generated ones).
	Line int
}

// OnExhaust is a budget's on_exhaust. The zero value is Stop.
type OnExhaust uint8

// The choices.
const (
	// Stop ends a stream the budget cannot pay for more of.
	Stop OnExhaust = iota
	// Finish lets the stream finish and charges it past the limit.
	Finish
)

// String returns "stop" or "finish".
func (o OnExhaust) String() string {
	if o == Finish {
		return "finish"
	}
	return "stop"
}

// Calendar aligns a fixed window to the calendar. The zero value is
// NoCalendar.
type Calendar uint8

// The calendars.
const (
	// NoCalendar: windows of the limit's period, aligned to the Unix epoch
	// (plus any offset).
	NoCalendar Calendar = iota
	// Day: one window per calendar day, midnight to midnight (23 or 25
	// hours when the clocks change).
	Day
	// Month: one window per calendar month.
	Month
)

var calendarNames = [...]string{NoCalendar: "", Day: "day", Month: "month"}

// String returns the calendar's name in configuration files: "day",
// "month", or "" for NoCalendar.
func (c Calendar) String() string {
	if int(c) < len(calendarNames) {
		return calendarNames[c]
	}
	return fmt.Sprintf("Calendar(%d)", uint8(c))
}

// MarshalText returns the calendar's name, for JSON.
func (c Calendar) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// ParseCalendar returns the calendar named s: "day", "month", or "" for
// NoCalendar.
func ParseCalendar(s string) (Calendar, error) {
	for c, name := range calendarNames {
		if name == s {
			return Calendar(c), nil
		}
	}
	return NoCalendar, fmt.Errorf("config: want day or month, got %q", s)
}

// Pattern matches a descriptor value: "*" matches any value, "abc*" any
// value with that prefix, anything else exactly.
type Pattern string

// Matches reports whether v matches the pattern.
func (p Pattern) Matches(v string) bool {
	if p == "*" {
		return true
	}
	if prefix, ok := strings.CutSuffix(string(p), "*"); ok {
		return strings.HasPrefix(v, prefix)
	}
	return string(p) == v
}

// Cost is what a request costs under a limit: Constant if not zero;
// otherwise the weight of the descriptor By (Weights, else Default) if By is
// set; otherwise the request's spend in micro-dollars if Spend is set (a
// limit with unit: usd); otherwise its tokens of Class, or the value of
// Expr, if set (PerClass); otherwise the request's own cost.
type Cost struct {
	Constant int64
	By       string
	Weights  map[string]int64
	Default  int64
	Spend    bool
	Class    TokenClass
	Expr     Expr
}

// PerClass reports whether the cost is counted in the request's token
// classes (a Class or an Expr): it is computed again from the real usage
// when the request settles.
func (c Cost) PerClass() bool { return c.Class != NoClass || c.Expr != nil }

// Least returns the smallest non-zero cost c charges a request: the
// constant, the smallest non-zero weight or default, or 1 for the request's
// own cost (and when every weight is 0).
func (c Cost) Least() int64 {
	switch {
	case c.Constant > 0:
		return c.Constant
	case c.By != "":
		least := int64(math.MaxInt64)
		for _, w := range append(slices.Collect(maps.Values(c.Weights)), c.Default) {
			if w > 0 {
				least = min(least, w)
			}
		}
		if least < math.MaxInt64 {
			return least
		}
	}
	return 1
}

// Of returns the cost of a request with the given descriptors, own cost,
// spend (in micro-dollars) and usage (nil: its own cost counts as uncached
// input tokens). A cost expression that fails or returns a negative value
// charges 0 and returns the error (ErrNegativeCost for the latter).
func (c Cost) Of(descriptors map[string]string, requestCost, spend int64, usage *Usage) (int64, error) {
	switch {
	case c.Constant > 0:
		return c.Constant, nil
	case c.By != "":
		if w, ok := c.Weights[descriptors[c.By]]; ok {
			return w, nil
		}
		return c.Default, nil
	case c.Spend:
		return spend, nil
	case c.PerClass():
		return c.classCost(descriptors, requestCost, usage)
	}
	return requestCost, nil
}

// Load reads and validates the file at path, which may hold no cost
// expression (see LoadWith).
func Load(path string) (*Config, error) { return LoadWith(path, Options{}) }

// LoadWith is Load with options.
func LoadWith(path string, o Options) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseWith(data, path, o)
}

// Parse validates data, naming source in errors; it may hold no cost
// expression (see ParseWith).
func Parse(data []byte, source string) (*Config, error) { return ParseWith(data, source, Options{}) }

// ParseWith is Parse with options.
func ParseWith(data []byte, source string, o Options) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(source, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: the file is empty", source)
	}
	b := builder{source: source, doc: doc.Content[0], wrongAt: map[string]bool{}, misspelt: map[string]bool{}, compile: o.Compile}
	var raw rawFile
	b.decode(nil, b.doc, &raw)
	cfg := b.build(&raw)
	if err := b.err(); err != nil {
		return nil, err
	}
	cfg.Source = source
	return cfg, nil
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlError rewrites a YAML syntax error as file:line: reason. A file that
// does not parse has no node tree to take a position from, and yaml.v3 gives
// a syntax error only as the text "yaml: line N: reason", so this one error
// is read from its text. The parser's "did not find expected ..." errors
// count lines from 0; they are shifted.
func yamlError(source string, err error) error {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Errorf("%s: %s", source, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	line, _ := strconv.Atoi(m[1])
	if strings.HasPrefix(m[2], "did not find expected") {
		line++
	}
	return fmt.Errorf("%s:%d: %s", source, line, m[2])
}

// ParseRate reads "N/period" such as "10/s", "100000/min", "5/5s", "2/1h30m".
// Period units: ms, s, sec, m, min, h, hour, d, day, or a Go duration.
func ParseRate(s string) (int64, time.Duration, error) {
	num, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("want N/period such as 2/s, got %q", s)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n <= 0 {
		return 0, 0, fmt.Errorf("want a positive whole number before '/', got %q", s)
	}
	d, err := ParsePeriod(per)
	if err != nil {
		return 0, 0, err
	}
	return n, d, nil
}

var periodUnits = map[string]time.Duration{
	"ms": time.Millisecond, "s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour, "d": 24 * time.Hour, "day": 24 * time.Hour,
}

// ParsePeriod reads a period: a unit alone ("s", "min", "day"), a Go
// duration ("5s", "1h30m") or a count of days ("7d").
func ParsePeriod(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if d, ok := periodUnits[s]; ok {
		return d, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("want a period such as s, min, 5s or 1h, got %q", s)
	}
	return d, nil
}
