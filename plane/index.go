package plane

import (
	"encoding/hex"
	"sync"
)

// digestIndex finds a key by the raw SHA-256 of a secret (current, or in
// its rotation grace period). Sharded maps behind read locks, not a
// sync.Map: a lookup by the digest's bytes allocates nothing (a sync.Map
// boxes its key), measured by BenchmarkCheckThreeLimits in service. Safe
// for concurrent use.
type digestIndex struct {
	shards [64]digestShard
}

type digestShard struct {
	mu sync.RWMutex
	m  map[string]*Key
}

func (x *digestIndex) shard(raw []byte) *digestShard { return &x.shards[raw[0]&63] }

// get returns the key whose digest is sum, or nil.
func (x *digestIndex) get(sum *[32]byte) *Key {
	s := x.shard(sum[:])
	s.mu.RLock()
	k := s.m[string(sum[:])]
	s.mu.RUnlock()
	return k
}

// put indexes k under the hex digest d; a malformed d is ignored (decodeKey
// refuses records without a digest of 64 hex digits).
func (x *digestIndex) put(d string, k *Key) {
	raw, err := hex.DecodeString(d)
	if err != nil || len(raw) != 32 {
		return
	}
	s := x.shard(raw)
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]*Key{}
	}
	s.m[string(raw)] = k
	s.mu.Unlock()
}

// remove drops the hex digest d if it still points to k.
func (x *digestIndex) remove(d string, k *Key) {
	raw, err := hex.DecodeString(d)
	if err != nil || len(raw) != 32 {
		return
	}
	s := x.shard(raw)
	s.mu.Lock()
	if s.m[string(raw)] == k {
		delete(s.m, string(raw))
	}
	s.mu.Unlock()
}
