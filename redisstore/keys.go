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
	var buf [96]byte // on the stack: most keys fit, and the string is the only allocation
	return string(s.appendKey(buf[:0], code, key))
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

// callKeys builds the Redis keys of a batch call's items (appendKeys') in
// one buffer and hands them out as parts of one string: one allocation for
// a call's keys rather than one per key. A lane reuses it from call to call.
type callKeys struct {
	buf  []byte
	ends []int // where each key ends in buf
}

// add adds the Redis keys of items, in order.
func (k *callKeys) add(s *Store, items []tokenlimit.Item) {
	for _, it := range items {
		k.buf = s.appendKey(k.buf, algorithmCodes[it.Limit.Algorithm], it.Key)
		k.ends = append(k.ends, len(k.buf))
		if it.Limit.Algorithm == tokenlimit.SlidingLog {
			k.buf = s.appendKey(k.buf, "sls", it.Key)
			k.ends = append(k.ends, len(k.buf))
		}
	}
}

// addRecord adds the Redis key of id's reservation record: on Cluster the
// one in slot slot (appendRecordKey).
func (k *callKeys) addRecord(s *Store, slot uint16, id string) {
	k.buf = s.appendRecordKey(k.buf, s.cluster, slot, id)
	k.ends = append(k.ends, len(k.buf))
}

// appendTo appends the keys added since the last appendTo to keys, and
// empties k.
func (k *callKeys) appendTo(keys []string) []string {
	all, start := string(k.buf), 0
	for _, end := range k.ends {
		keys = append(keys, all[start:end])
		start = end
	}
	k.buf, k.ends = k.buf[:0], k.ends[:0]
	return keys
}

// appendKey appends the Redis key of key's budget under the algorithm named
// code (see Key) to b: the one place that spells the key's form.
func (s *Store) appendKey(b []byte, code, key string) []byte {
	b = append(append(b, s.prefix...), code...)
	if hasHashTag(key) {
		return append(append(b, ":~"...), key...)
	}
	return append(append(append(b, ":{"...), key...), '}')
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
