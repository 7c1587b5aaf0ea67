package config

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ParseLimits validates data, a JSON (or YAML flow) list of limits written
// as under limits: in the file but without key or match, for a budget that
// the caller keys itself (the quota plane: one budget per team or per api
// key). field names the list in errors, such as "limits"; each error says
// where and why, such as
//
//	limits[1].refill: want N/period such as 2/s, got "fast"
//
// and every error is reported at once. An empty list is valid.
func ParseLimits(data []byte, field string) ([]Limit, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: want a list of limits: %s", field, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	// The list goes through the file's builder as the value of field; a
	// JSON body's lines mean nothing to its sender, so errors name the
	// field path only (an empty source).
	b := builder{
		doc: &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Value: field}, doc.Content[0],
		}},
		wrongAt: map[string]bool{}, misspelt: map[string]bool{},
	}
	var raw []rawLimit
	b.decode([]any{field}, doc.Content[0], &raw)
	var out []Limit
	names := map[string]int{}
	for i := range raw {
		path := []any{field, i}
		r := &raw[i]
		if r.Key != nil {
			b.fail(at(path, "key"), "a plane limit is one budget for its team or key: it takes no key")
		}
		if r.Match != nil {
			b.fail(at(path, "match"), "a plane limit applies to every call of its team or key: it takes no match")
		}
		l, ok := b.limit(path, r)
		if j, dup := names[l.Name]; dup && ok {
			b.fail(at(path, "name"), "%q is already the name of %s[%d]", l.Name, field, j)
			continue
		}
		names[l.Name] = i
		if ok {
			out = append(out, l)
		}
	}
	if err := b.err(); err != nil {
		return nil, err
	}
	return out, nil
}
