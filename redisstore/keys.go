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

// Key returns the Redis key that holds key's budget under algorithm alg.
// A key without a Redis Cluster hash tag becomes its own tag, so every budget
// lives in one slot: "user=alice" → "rl:tb:{user=alice}". A key with a tag
// keeps it, after a '~' that keeps the two forms apart: "{tenant=acme}:chat"
// → "rl:tb:~{tenant=acme}:chat". Distinct keys never share a Redis key.
func (s *Store) Key(key string, alg tokenlimit.Algorithm) string {
	return s.key(algorithmCodes[alg], key)
}

func (s *Store) key(code, key string) string {
	var b strings.Builder
	b.Grow(s.keyLen(code, key))
	s.writeKey(&b, code, key)
	return b.String()
}

// Keys returns every Redis key of key's budget under alg: Key's, and for a
// sliding log the key of its running sum.
func (s *Store) Keys(key string, alg tokenlimit.Algorithm) []string {
	return s.appendKeys(nil, key, alg)
}

// appendKeys adds the Redis keys of a budget: one, or for a sliding log the
// log and its sum ("rl:sls:..."), in the same slot.
func (s *Store) appendKeys(keys []string, key string, alg tokenlimit.Algorithm) []string {
	keys = append(keys, s.Key(key, alg))
	if alg == tokenlimit.SlidingLog {
		keys = append(keys, s.key("sls", key))
	}
	return keys
}

// appendJobKeys adds the Redis keys of every item of jobs (appendKeys'),
// built in one string: one allocation for a batch call's keys rather than
// one per key.
func (s *Store) appendJobKeys(keys []string, jobs []*batchJob) []string {
	n := 0
	for _, j := range jobs {
		for _, it := range j.items {
			n += s.keysLen(it.Key, it.Limit.Algorithm)
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, j := range jobs {
		for _, it := range j.items {
			s.writeKey(&b, algorithmCodes[it.Limit.Algorithm], it.Key)
			if it.Limit.Algorithm == tokenlimit.SlidingLog {
				s.writeKey(&b, "sls", it.Key)
			}
		}
	}
	all := b.String()
	for _, j := range jobs {
		for _, it := range j.items {
			n := s.keyLen(algorithmCodes[it.Limit.Algorithm], it.Key)
			keys, all = append(keys, all[:n]), all[n:]
			if it.Limit.Algorithm == tokenlimit.SlidingLog {
				n = s.keyLen("sls", it.Key)
				keys, all = append(keys, all[:n]), all[n:]
			}
		}
	}
	return keys
}

// keysLen is the length of appendKeys' keys, together.
func (s *Store) keysLen(key string, alg tokenlimit.Algorithm) int {
	n := s.keyLen(algorithmCodes[alg], key)
	if alg == tokenlimit.SlidingLog {
		n += s.keyLen("sls", key)
	}
	return n
}

// keyLen is the length of s.key(code, key).
func (s *Store) keyLen(code, key string) int {
	if hasHashTag(key) {
		return len(s.prefix) + len(code) + 2 + len(key)
	}
	return len(s.prefix) + len(code) + 3 + len(key)
}

// writeKey writes the Redis key of key's budget under the algorithm named
// code (see Key) to b: the one place that spells the key's form.
func (s *Store) writeKey(b *strings.Builder, code, key string) {
	b.WriteString(s.prefix)
	b.WriteString(code)
	if hasHashTag(key) {
		b.WriteString(":~")
		b.WriteString(key)
		return
	}
	b.WriteString(":{")
	b.WriteString(key)
	b.WriteByte('}')
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
