package redisstore

import (
	"strings"

	"github.com/tokenlimit/tokenlimit"
)

// algorithmCodes name the algorithms in keys: rl:<code>:{<tag>}...
var algorithmCodes = [...]string{
	tokenlimit.FixedWindow:    "fw",
	tokenlimit.SlidingLog:     "sl",
	tokenlimit.SlidingCounter: "sc",
	tokenlimit.TokenBucket:    "tb",
	tokenlimit.GCRA:           "gcra",
}

// Key returns the Redis key that holds key's budget under algorithm alg, such
// as "rl:tb:{user=alice}". A key that has a Redis Cluster hash tag keeps it
// ("rl:tb:{tenant=acme}:chat"); any other key becomes its own tag, so every
// budget lives in one slot. A sliding log also uses Key(...)+":sum".
func (s *Store) Key(key string, alg tokenlimit.Algorithm) string {
	code := algorithmCodes[alg]
	if hasHashTag(key) {
		return s.prefix + code + ":" + key
	}
	return s.prefix + code + ":{" + key + "}"
}

func (s *Store) appendKeys(keys []string, key string, alg tokenlimit.Algorithm) []string {
	k := s.Key(key, alg)
	if alg == tokenlimit.SlidingLog {
		return append(keys, k, k+":sum")
	}
	return append(keys, k)
}

// hasHashTag applies Redis Cluster's rule: the key has a '{' followed, later,
// by a '}' with at least one byte between the first '{' and that '}'.
func hasHashTag(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return false
	}
	end := strings.IndexByte(key[open+1:], '}')
	return end > 0
}
