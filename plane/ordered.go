package plane

import (
	"slices"
	"sort"
	"strings"
)

// maxChunk bounds a chunk of an ordered index: an insert or a removal moves
// at most this many entries.
const maxChunk = 512

// ordered holds values sorted by id in chunks of at most maxChunk, so that
// a change costs two binary searches and at most one chunk moved, and a
// page from any id costs two binary searches and the page: listing never
// sorts. The zero value (with id set) is empty. Not safe for concurrent
// use: the Plane guards it.
type ordered[V any] struct {
	id     func(V) string
	chunks [][]V
}

// find returns where id is or would go: the chunk (len(chunks) when id
// is past the last value) and the position in it.
func (o *ordered[V]) find(id string) (c, i int, found bool) {
	c = sort.Search(len(o.chunks), func(j int) bool {
		ch := o.chunks[j]
		return o.id(ch[len(ch)-1]) >= id
	})
	if c == len(o.chunks) {
		return c, 0, false
	}
	i, found = slices.BinarySearchFunc(o.chunks[c], id, func(v V, id string) int { return strings.Compare(o.id(v), id) })
	return c, i, found
}

// put inserts v, or replaces the value of its id.
func (o *ordered[V]) put(v V) {
	c, i, found := o.find(o.id(v))
	if found {
		o.chunks[c][i] = v
		return
	}
	if c == len(o.chunks) { // past the last value: append to the last chunk
		if c == 0 {
			o.chunks = append(o.chunks, []V{v})
			return
		}
		c--
		i = len(o.chunks[c])
	}
	ch := slices.Insert(o.chunks[c], i, v)
	if len(ch) > maxChunk {
		half := len(ch) / 2
		right := slices.Clone(ch[half:])
		clear(ch[half:]) // no stale references past the left half
		ch = ch[:half]
		o.chunks = slices.Insert(o.chunks, c+1, right)
	}
	o.chunks[c] = ch
}

// remove drops the value of id, if any.
func (o *ordered[V]) remove(id string) {
	c, i, found := o.find(id)
	if !found {
		return
	}
	o.chunks[c] = slices.Delete(o.chunks[c], i, i+1)
	if len(o.chunks[c]) == 0 {
		o.chunks = slices.Delete(o.chunks, c, c+1)
	}
}

// empty reports whether o holds no value.
func (o *ordered[V]) empty() bool { return len(o.chunks) == 0 }

// ascend calls f with the values whose ids sort after after, in order,
// until f returns false.
func (o *ordered[V]) ascend(after string, f func(V) bool) {
	c, i, found := o.find(after)
	if found {
		i++
	}
	for ; c < len(o.chunks); c, i = c+1, 0 {
		for _, v := range o.chunks[c][i:] {
			if !f(v) {
				return
			}
		}
	}
}
