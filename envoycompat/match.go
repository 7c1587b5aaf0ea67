package envoycompat

import "strings"

// Entry is one key/value pair of a request's descriptor.
type Entry struct {
	Key, Value string
}

// match finds the rate limit of one request descriptor in domain, with
// envoyproxy/ratelimit's rule: walk the tree one entry at a time, at each
// level preferring the child "key_value", then the first wildcard child (in
// file order) whose pattern, up to its trailing '*', is a prefix of
// "key_value" (a '*' elsewhere is an ordinary character), then the key-only child
// "key"; the limit applies only if it sits at exactly the descriptor's
// depth. It returns nil when no limit applies. shared holds, for entries
// matched by a share_threshold wildcard, the pattern that replaces their
// value in the budget's key.
func (c *Config) match(domain string, entries []Entry) (limit *RateLimit, shared map[int]string) {
	level := c.domains[domain]
	if level == nil {
		return nil, nil
	}
	for i, e := range entries {
		final := e.Key + "_" + e.Value
		next := level.children[final]
		wild := ""
		if next == nil {
			for _, w := range level.wildcards {
				if strings.HasPrefix(final, w.prefix) {
					next, wild = level.children[w.key], w.key
					break
				}
			}
		}
		if next == nil {
			next = level.children[e.Key]
		}
		if next == nil {
			break
		}
		if wild != "" && next.shareThreshold {
			if shared == nil {
				shared = map[int]string{}
			}
			shared[i] = strings.TrimPrefix(next.pattern, e.Key+"_")
		}
		if next.limit != nil && i == len(entries)-1 {
			limit = next.limit
		}
		if len(next.children) == 0 {
			break
		}
		level = next
	}
	if limit == nil {
		shared = nil
	}
	return limit, shared
}
