package config

import (
	"net/url"
	"os"
	"strings"
	"time"
)

// MainStore is the name of the store a limit without store: uses, the one
// serve and proxy open from --redis (or the embedded store), in metrics and
// health. No entry of stores may take it.
const MainStore = "default"

// Store is a named remote store, an entry of stores: in the file: the
// Redis where the budgets of the limits that name it live (Limit.Store),
// such as the home region of a global limit. Its calls have their own
// deadline and circuit breaker; each limit still follows its own failure
// mode while it fails.
type Store struct {
	// URL is the Redis URL, as --redis takes it: redis://, rediss:// or
	// unix://, with ?addr= repeated for Cluster and ?master_set= for
	// Sentinel. It may hold a password: show it only as Redacted.
	URL string
	// Env names the environment variable URL was read from (redis_env),
	// "" when the file gives it (redis).
	Env string
	// Timeout bounds each call to the store; 0 takes the main store's
	// (--store-timeout).
	Timeout time.Duration
}

// Redacted is the store's URL with any password replaced by "xxxxx", for
// logs and errors.
func (s Store) Redacted() string { return redactURL(s.URL) }

type rawStore struct {
	Redis    string `yaml:"redis"`
	RedisEnv string `yaml:"redis_env"`
	Timeout  string `yaml:"timeout"`
}

// MaxStoreTimeout is the longest timeout a named store may take: past it a
// caller waits longer than any gateway's own deadline.
const MaxStoreTimeout = time.Minute

// stores reads stores:, the named remote stores.
func (b *builder) stores(raw map[string]rawStore) map[string]Store {
	out := map[string]Store{}
	for _, name := range sortedKeys(raw) {
		path := []any{"stores", name}
		switch {
		case name == MainStore:
			b.fail(path, "%q names the main store (--redis, or the embedded store): give this store another name", name)
			continue
		case !namePattern.MatchString(name):
			b.fail(path, "store names follow the rules of limit names; got %q", name)
			continue
		}
		out[name] = b.store(path, raw[name])
	}
	return out
}

func (b *builder) store(path []any, r rawStore) Store {
	s := Store{URL: r.Redis}
	switch {
	case r.Redis != "" && r.RedisEnv != "":
		b.fail(at(path, "redis_env"), "give the URL once: redis or redis_env, not both")
	case r.RedisEnv != "":
		s.Env, s.URL = r.RedisEnv, os.Getenv(r.RedisEnv)
		if s.URL == "" {
			b.fail(at(path, "redis_env"), "the environment variable %s is empty or unset", r.RedisEnv)
		} else if why := badRedisURL(s.URL); why != "" {
			b.fail(at(path, "redis_env"), "the environment variable %s %s", r.RedisEnv, why)
		}
	case r.Redis == "" && !b.misspelt[pathString(at(path, "redis"))]:
		b.fail(at(path, "redis"), "missing: want a Redis URL such as redis://10.0.0.5:6379/0 (or redis_env naming the environment variable that holds it)")
	default:
		if why := badRedisURL(r.Redis); why != "" {
			b.fail(at(path, "redis"), "%s", why)
		}
	}
	if r.Timeout != "" {
		d, err := time.ParseDuration(r.Timeout)
		if err != nil || d <= 0 || d > MaxStoreTimeout {
			b.fail(at(path, "timeout"), "want a duration above 0 and at most %s, such as 50ms; got %q", MaxStoreTimeout, r.Timeout)
		}
		s.Timeout = d
	}
	return s
}

// badRedisURL says why u is not a Redis URL, "" if it is one. It never
// repeats the URL's password.
func badRedisURL(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return "is not a URL: want one such as redis://10.0.0.5:6379/0" // url's error would repeat it, password and all
	}
	switch parsed.Scheme {
	case "redis", "rediss":
		if parsed.Host == "" && parsed.Query().Get("addr") == "" {
			return "has no host: want a URL such as redis://10.0.0.5:6379/0, got " + quote(redactURL(u))
		}
	case "unix":
		if parsed.Path == "" {
			return "has no socket path: want a URL such as unix:///run/redis.sock, got " + quote(redactURL(u))
		}
	default:
		return "want a redis://, rediss:// or unix:// URL, got " + quote(redactURL(u))
	}
	return ""
}

// redactURL is u with any password replaced by "xxxxx"; a URL that does
// not parse is shown as its scheme alone.
func redactURL(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		scheme, _, _ := strings.Cut(u, ":")
		return scheme + "://…"
	}
	return parsed.Redacted()
}

func quote(s string) string { return `"` + s + `"` }

// storeOf applies a limit's store, which must name an entry of stores.
// stores are the entries of stores: that have a valid name.
func (b *builder) storeOf(path []any, name string, stores map[string]Store, l *Limit) {
	if _, ok := stores[name]; ok || name == "" {
		l.Store = name
		return
	}
	known := sortedKeys(stores)
	switch near := nearest(name, known); {
	case len(known) == 0:
		b.fail(at(path, "store"), "no store named %q: the file has no stores (name it under stores: with its redis URL)", name)
	case near != "":
		b.fail(at(path, "store"), "no store named %q under stores (did you mean %s?)", name, near)
	default:
		b.fail(at(path, "store"), "no store named %q under stores (want %s)", name, orList(known))
	}
}
