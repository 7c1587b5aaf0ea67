package config

import (
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file reads the YAML document into the raw structs of build.go by
// walking its nodes, so that every unknown field, repeated key and value of
// the wrong type is reported at its own position with its field path. A raw
// struct's fields are named by their yaml tags; a yaml.Node field keeps its
// node for the builder to read (an amount in dollars or in tokens, a cost).

var nodeType = reflect.TypeFor[yaml.Node]()

// decode fills dst, a pointer, from n, the node at path. What it cannot read
// stays at its zero value, its path marked wrong.
func (b *builder) decode(path []any, n *yaml.Node, dst any) {
	b.decodeValue(path, n, reflect.ValueOf(dst).Elem())
}

func (b *builder) decodeValue(path []any, n *yaml.Node, v reflect.Value) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if v.Type() == nodeType {
		v.Set(reflect.ValueOf(*n))
		return
	}
	if n.ShortTag() == "!!null" {
		return // absent: the zero value
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		b.decodeValue(path, n, v.Elem())
	case reflect.Struct:
		b.decodeStruct(path, n, v)
	case reflect.Map:
		b.decodeMap(path, n, v)
	case reflect.Slice:
		b.decodeSlice(path, n, v)
	default:
		b.decodeScalar(path, n, v)
	}
}

// decodeStruct reads a mapping into a raw struct, refusing unknown fields.
func (b *builder) decodeStruct(path []any, n *yaml.Node, v reflect.Value) {
	if !b.wantKind(path, n, yaml.MappingNode, v.Type()) {
		return
	}
	names := fieldNames(v.Type())
	for key, value := range b.entries(path, n) {
		i := slices.Index(names, key.Value)
		if i < 0 {
			b.unknownField(path, key, names)
			continue
		}
		b.decodeValue(at(path, key.Value), value, v.Field(i))
	}
}

// decodeMap reads a mapping into a map keyed by the mapping's keys.
func (b *builder) decodeMap(path []any, n *yaml.Node, v reflect.Value) {
	if !b.wantKind(path, n, yaml.MappingNode, v.Type()) {
		return
	}
	v.Set(reflect.MakeMap(v.Type()))
	for key, value := range b.entries(path, n) {
		elem := reflect.New(v.Type().Elem()).Elem()
		b.decodeValue(at(path, key.Value), value, elem)
		v.SetMapIndex(reflect.ValueOf(key.Value), elem)
	}
}

func (b *builder) decodeSlice(path []any, n *yaml.Node, v reflect.Value) {
	if !b.wantKind(path, n, yaml.SequenceNode, v.Type()) {
		return
	}
	v.Set(reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content)))
	for i, item := range n.Content {
		b.decodeValue(at(path, i), item, v.Index(i))
	}
}

// decodeScalar reads a string, a number or a boolean with YAML's own rules
// (any scalar is a string; "0x10" is a number).
func (b *builder) decodeScalar(path []any, n *yaml.Node, v reflect.Value) {
	if !b.wantKind(path, n, yaml.ScalarNode, v.Type()) {
		return
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		b.wrongType(path, n, v.Type())
	}
}

// wantKind reports whether n is of kind, else reports the value of the
// wrong type.
func (b *builder) wantKind(path []any, n *yaml.Node, kind yaml.Kind, t reflect.Type) bool {
	if n.Kind == kind {
		return true
	}
	b.wrongType(path, n, t)
	return false
}

func (b *builder) wrongType(path []any, n *yaml.Node, t reflect.Type) {
	b.failAt(n, path, "want %s, got %s", typeWords(t), valueWords(n))
	b.wrongAt[pathString(path)] = true
}

// entries yields a mapping's key and value nodes in file order, once per
// key: a repeated key is reported, and the first one counts. A merge key
// (<<: *anchor) yields the entries of the mappings it names that the
// mapping does not give itself.
func (b *builder) entries(path []any, n *yaml.Node) func(yield func(key, value *yaml.Node) bool) {
	return func(yield func(key, value *yaml.Node) bool) {
		seen := map[string]*yaml.Node{}
		var merged []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			if key.ShortTag() == "!!merge" {
				merged = append(merged, mergeSources(value)...)
				continue
			}
			if first, dup := seen[key.Value]; dup {
				b.repeatedKey(at(path, key.Value), key, first, n.Style&yaml.FlowStyle != 0)
				continue
			}
			seen[key.Value] = key
			if !yield(key, value) {
				return
			}
		}
		for _, m := range merged {
			for i := 0; i+1 < len(m.Content); i += 2 {
				key := m.Content[i]
				if _, given := seen[key.Value]; given {
					continue
				}
				seen[key.Value] = key
				if !yield(key, m.Content[i+1]) {
					return
				}
			}
		}
	}
}

// repeatedKey reports key, given already as first (in a flow mapping,
// where one line holds several keys, with first's column).
func (b *builder) repeatedKey(path []any, key, first *yaml.Node, inFlow bool) {
	switch {
	case b.source == "":
		b.failAt(key, path, "repeated key") // no file: its lines mean nothing
	case inFlow:
		b.failAt(key, path, "repeated key: it is already given at line %d, column %d", first.Line, first.Column)
	default:
		b.failAt(key, path, "repeated key: it is already given at line %d", first.Line)
	}
}

// mergeSources returns the mappings a merge key names: one, or a list.
func mergeSources(n *yaml.Node) []*yaml.Node {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.MappingNode {
		return []*yaml.Node{n}
	}
	var out []*yaml.Node
	if n.Kind == yaml.SequenceNode {
		for _, m := range n.Content {
			out = append(out, mergeSources(m)...)
		}
	}
	return out
}

// unknownField reports a field the mapping at path does not have, with the
// known field nearest to it, or the list of them when none is near.
func (b *builder) unknownField(path []any, key *yaml.Node, known []string) {
	if near := nearest(key.Value, known); near != "" {
		b.misspelt[pathString(at(path, near))] = true
		b.failAt(key, at(path, key.Value), "unknown field (did you mean %s?)", near)
		return
	}
	b.failAt(key, at(path, key.Value), "unknown field (want %s)", orList(known))
}

// fieldNames lists the yaml names of a raw struct's fields, in field order.
func fieldNames(t reflect.Type) []string {
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
	}
	return names
}

// orList writes names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// typeWords says in words what a raw field of type t wants.
func typeWords(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return typeWords(t.Elem())
	case reflect.Slice:
		if t.Elem() == reflect.TypeFor[rawLimit]() {
			return "a list of limits"
		}
		return "a list"
	case reflect.Map, reflect.Struct:
		if t == reflect.TypeFor[rawFile]() {
			return "a mapping of settings such as limits and plans"
		}
		return "a mapping"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	}
	return "a string"
}

// valueWords says in words what n is: a scalar quoted, else its kind.
func valueWords(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// nearest returns the name in known closest to s, if it is near enough to
// be a typo of it (at most one edit in four, case aside), else "".
func nearest(s string, known []string) string {
	best, bestDist := "", max(1, len(s)/4)+1
	for _, k := range known {
		if d := editDistance(strings.ToLower(s), k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// the fewest insertions, deletions, substitutions and swaps of neighbours
// that turn a into b.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
