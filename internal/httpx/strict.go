package httpx

// This file holds the checks that every JSON body passes on top of
// encoding/json, which silently keeps the last of two members with the same
// name and replaces invalid UTF-8 (and lone UTF-16 surrogates in \u escapes)
// with U+FFFD, so that distinct bytes would collapse onto one value.

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// frame is one open object or array on the way down to the current token.
type frame struct {
	object bool
	path   string   // this container's path ("" for the top level)
	names  []string // an object's member names so far
	key    string   // the member whose value comes next
	index  int      // an array's next element index
	inKey  bool     // an object whose next string token is a member name
}

// strict checks data, a JSON text that encoding/json has already decoded
// without error, for objects with two members of the same name and for
// strings (names or values) that are not valid UTF-8, or that hold a \u
// escape of a lone surrogate. It returns nil, or the error of the first
// fault in document order: a 400 naming the member. A malformed text is
// left to the decoder: strict returns nil for it.
func strict(data []byte) *Error {
	checkUTF8 := !utf8.Valid(data) || bytes.Contains(data, []byte(`\u`))
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []*frame
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF at the end; a syntax error is the decoder's to report
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			continue
		}
		if top != nil && top.object && top.inKey {
			name := tok.(string)
			if checkUTF8 && !validString(data[start:dec.InputOffset()]) {
				return BadRequest(pathOr(top.path), "a member name is not valid UTF-8")
			}
			for _, seen := range top.names {
				if seen == name {
					return BadRequest(join(top.path, name), "appears twice in one object; each member may be given once")
				}
			}
			top.names = append(top.names, name)
			top.key, top.inKey = name, false
			continue
		}
		path := ""
		if top != nil {
			if top.object {
				path = join(top.path, top.key)
				top.inKey = true
			} else {
				path = top.path + "[" + strconv.Itoa(top.index) + "]"
				top.index++
			}
		}
		switch v := tok.(type) {
		case json.Delim:
			stack = append(stack, &frame{object: v == '{', path: path, inKey: v == '{'})
		case string:
			if checkUTF8 && !validString(data[start:dec.InputOffset()]) {
				return BadRequest(pathOr(path), "not valid UTF-8: send text as UTF-8 (bytes are not collapsed into U+FFFD)")
			}
		}
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func pathOr(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

// validString reports whether the JSON string in seg (optionally preceded by
// whitespace, ',' or ':') is valid UTF-8 once unescaped: raw bytes must be
// UTF-8 and \u escapes of surrogates must come in high-low pairs.
func validString(seg []byte) bool {
	i := bytes.IndexByte(seg, '"')
	if i < 0 || len(seg)-i < 2 {
		return true // not a string: nothing to check
	}
	raw := seg[i+1 : len(seg)-1]
	for j := 0; j < len(raw); {
		switch c := raw[j]; {
		case c == '\\' && j+1 < len(raw) && raw[j+1] == 'u':
			r, ok := hex4(raw[j+2:])
			j += 6
			switch {
			case !ok:
				return false
			case r >= 0xDC00 && r < 0xE000:
				return false // a low surrogate alone
			case r >= 0xD800 && r < 0xDC00:
				lo, ok := uint16(0), j+1 < len(raw) && raw[j] == '\\' && raw[j+1] == 'u'
				if ok {
					lo, ok = hex4(raw[j+2:])
				}
				if !ok || lo < 0xDC00 || lo >= 0xE000 {
					return false // a high surrogate not followed by a low one
				}
				j += 6
			}
		case c == '\\':
			j += 2
		case c < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(raw[j:])
			if r == utf8.RuneError && size == 1 {
				return false
			}
			j += size
		}
	}
	return true
}

func hex4(b []byte) (uint16, bool) {
	if len(b) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return uint16(v), err == nil
}
