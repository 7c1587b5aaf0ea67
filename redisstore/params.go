package redisstore

import (
	"encoding/binary"

	"github.com/tokenlimit/tokenlimit"
)

// Checks, reservations and settlements pass their numbers (times, the
// items' algorithms, parameters and costs, a settlement's amounts) as one
// argument: a MessagePack array of integers, which the Lua decodes in one
// call (cmsgpack.unpack). One decimal argument per number cost Redis a
// string and a tonumber per value, and the client a string each.

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

// appendString adds s as a MessagePack string.
func appendString(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
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

// appendLimit adds a limit's 4 values: algorithm and parameters.
func appendLimit(b []byte, l tokenlimit.Limit) []byte {
	p1, p2, p3 := limitParams(l)
	return appendInt(appendInt(appendInt(appendInt(b, int64(l.Algorithm)), p1), p2), p3)
}

// callLimits are the distinct limits of a batch call's items: the call
// packs each limit once and an item the position of its limit's values
// (check.lua), so that Redis decodes 2 values per item rather than 5.
// Items are looked up among the first maxLimitScan limits only; an item
// whose limit is not among them adds it again, which costs the call
// values, never a wrong answer.
type callLimits struct {
	limits []tokenlimit.Limit
	// refs holds, per item added, where its limit's values start in the
	// packed array as the Lua indexes it: the index before the algorithm's.
	refs []int64
}

// maxLimitScan bounds the limits an item's is compared with.
const maxLimitScan = 16

// add records an item's limit.
func (c *callLimits) add(l tokenlimit.Limit) {
	for i, known := range c.limits[:min(len(c.limits), maxLimitScan)] {
		if known == l {
			c.refs = append(c.refs, limitRef(i))
			return
		}
	}
	c.limits = append(c.limits, l)
	c.refs = append(c.refs, limitRef(len(c.limits)-1))
}

// appendTo adds the number of c's limits and each limit's 4 values: the
// start of check.lua's and reserve.lua's packed array.
func (c *callLimits) appendTo(b []byte) []byte {
	b = appendInt(b, int64(len(c.limits)))
	for _, l := range c.limits {
		b = appendLimit(b, l)
	}
	return b
}

// appendRefs adds 2 values per item: where its limit's values start
// (refs[i], callLimits.refs) and its cost.
func appendRefs(b []byte, items []tokenlimit.Item, refs []int64) []byte {
	for i, it := range items {
		b = appendInt(appendInt(b, refs[i]), it.Cost)
	}
	return b
}

// limitRef is where the i-th limit's values start in the packed array:
// after the count of limits and the 4 values of each one before it.
func limitRef(i int) int64 {
	return 1 + 4*int64(i)
}

// reset empties c, keeping its arrays.
func (c *callLimits) reset() {
	clear(c.limits)
	c.limits, c.refs = c.limits[:0], c.refs[:0]
}
