package config

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
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
	// JSON is YAML: wrapped in {limits: ...} and rewritten in block style
	// (one field a line, so that the decoder's line numbers find each
	// field), the list goes through the file's builder.
	var list yaml.Node
	if err := yaml.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%s: want a list of limits: %s", field, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	doc, err := yaml.Marshal(map[string]*yaml.Node{"limits": blockStyle(&list)})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	const source = "plane"
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	var raw struct {
		Limits []rawLimit `yaml:"limits"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	b := builder{source: source, root: &root, typeFailed: map[string]bool{}, unknownIn: map[string]bool{}}
	if err := dec.Decode(&raw); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, fmt.Errorf("%s: want a list of limits: %s", field, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		b.typeErrors(te)
	}
	var out []Limit
	names := map[string]int{}
	for i := range raw.Limits {
		path := []any{"limits", i}
		r := &raw.Limits[i]
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
	if len(b.errs) > 0 {
		return nil, stripPositions(source, field, b.errs)
	}
	return out, nil
}

// blockStyle clears the flow style of n and everything under it, so that
// it marshals one field a line.
func blockStyle(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	n.Style &^= yaml.FlowStyle
	for _, c := range n.Content {
		blockStyle(c)
	}
	return n
}

var position = regexp.MustCompile(`^[^:]*:\d+: (limits)?`)

// stripPositions drops the "source:line: " of each error, and names the
// list field: a JSON body's lines mean nothing to its sender, the field
// path says it all.
func stripPositions(source, field string, errs []error) error {
	out := make([]error, len(errs))
	for i, err := range errs {
		msg := err.Error()
		if strings.HasPrefix(msg, source+":") {
			msg = position.ReplaceAllStringFunc(msg, func(m string) string {
				if strings.HasSuffix(m, "limits") {
					return field
				}
				return ""
			})
		}
		out[i] = errors.New(msg)
	}
	return errors.Join(out...)
}
