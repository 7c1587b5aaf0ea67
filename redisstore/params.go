package redisstore

import (
	"encoding/binary"

	"github.com/tokenlimit/tokenlimit"
)

// The checks and reservations pass their items' numbers (algorithm,
// parameters, cost) as one argument: a MessagePack array of integers, which
// the Lua decodes in one call (cmsgpack.unpack). One decimal argument per
// number cost Redis a string and a tonumber per value, and the client a
// string each.

// serverTime stands for "the server's TIME" where a packed time would be.
const serverTime = -1

// appendArray starts a MessagePack array of n values.
func appendArray(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

// appendInt adds v as a MessagePack integer, in its shortest form.
func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0 && v < 128:
		return append(b, byte(v))
	case v < 0 && v >= -32:
		return append(b, byte(v))
	case v >= 0 && v < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v >= 0 && v < 1<<32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

// limitParams are a limit's three parameters as the Lua takes them: limit,
// window µs and offset µs for the window algorithms; capacity and the
// interval per token as num/den µs for the buckets.
func limitParams(l tokenlimit.Limit) (p1, p2, p3 int64) {
	if l.Algorithm == tokenlimit.TokenBucket || l.Algorithm == tokenlimit.GCRA {
		p2, p3 = l.Interval()
		return l.Capacity(), p2, p3
	}
	return l.Quota, l.Period.Microseconds(), l.Offset.Microseconds()
}

// appendItem adds an item's 5 values: algorithm, parameters, cost.
func appendItem(b []byte, l tokenlimit.Limit, cost int64) []byte {
	p1, p2, p3 := limitParams(l)
	return appendInt(appendInt(appendInt(appendInt(appendInt(b, int64(l.Algorithm)), p1), p2), p3), cost)
}

// packItems is the packed argument of items: their 5 values each.
func packItems(items []tokenlimit.Item) string {
	b := appendArray(make([]byte, 0, 5+len(items)*24), 5*len(items))
	for _, it := range items {
		b = appendItem(b, it.Limit, it.Cost)
	}
	return string(b)
}
