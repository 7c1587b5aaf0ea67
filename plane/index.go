package plane

import (
	"encoding/hex"
	"sync"
)

// digestIndex finds a key by the raw SHA-256 of a secret (current, or in
// its rotation grace period). Sharded maps behind read locks, not a
// sync.Map: a lookup by the digest's bytes allocates nothing (a sync.Map
// boxes its key), measured by BenchmarkCheckThreeLimits in service. The
// digests are the maps' keys themselves, not strings pointing elsewhere: a
// lookup among 100,000 keys reads one place in memory fewer (planeload in
// bench). Safe for concurrent use.
type digestIndex struct {
	shards [64]digestShard
}

type digestShard struct {
	mu sync.RWMutex
	m  map[[32]byte]*Key
}

func (x *digestIndex) shard(raw *[32]byte) *digestShard { return &x.shards[raw[0]&63] }

// get returns the key whose digest is sum, or nil.
func (x *digestIndex) get(sum *[32]byte) *Key {
	s := x.shard(sum)
	s.mu.RLock()
	k := s.m[*sum]
	s.mu.RUnlock()
	return k
}

// rawDigest decodes the hex digest d; false if d is not 64 hex digits.
func rawDigest(d string) (raw [32]byte, ok bool) {
	n, err := hex.Decode(raw[:], []byte(d))
	return raw, err == nil && n == len(raw) && len(d) == 2*len(raw)
}

// put indexes k under the hex digest d; a malformed d is ignored (decodeKey
// refuses records without a digest of 64 hex digits).
func (x *digestIndex) put(d string, k *Key) {
	raw, ok := rawDigest(d)
	if !ok {
		return
	}
	s := x.shard(&raw)
	s.mu.Lock()
	if s.m == nil {
		s.m = map[[32]byte]*Key{}
	}
	s.m[raw] = k
	s.mu.Unlock()
}

// remove drops the hex digest d if it still points to k.
func (x *digestIndex) remove(d string, k *Key) {
	raw, ok := rawDigest(d)
	if !ok {
		return
	}
	s := x.shard(&raw)
	s.mu.Lock()
	if s.m[raw] == k {
		delete(s.m, raw)
	}
	s.mu.Unlock()
}
