package tokenizer

import (
	"math"
	"unicode"
	"unicode/utf8"
)

// This file counts tokens without building them: a hand-written splitter
// that cuts text exactly where the encodings' split patterns do (see
// encodingSpecs), and tiktoken's byte-pair merge over each piece, counting
// the parts left. It allocates nothing per piece. bpe_test.go checks both
// against the regular expressions and tiktoken-go's encoder.

// class is what the split patterns ask of a character.
type class uint8

const (
	isLetter class = 1 << iota // \p{L}
	isNumber                   // \p{N}
	isSpace                    // \s
	isUpper                    // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	isLower                    // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	isMark                     // \p{M}
	isCRLF                     // [\r\n]
)

var asciiClass = func() (t [utf8.RuneSelf]class) {
	for r := range utf8.RuneSelf {
		t[r] = classify(rune(r))
	}
	return t
}()

func classify(r rune) class {
	var c class
	switch {
	case unicode.IsLetter(r):
		c |= isLetter
		if unicode.IsUpper(r) || unicode.IsTitle(r) || unicode.In(r, unicode.Lm, unicode.Lo) {
			c |= isUpper
		}
		if unicode.IsLower(r) || unicode.In(r, unicode.Lm, unicode.Lo) {
			c |= isLower
		}
	case unicode.IsNumber(r):
		c |= isNumber
	case unicode.IsMark(r):
		c |= isMark | isUpper | isLower
	case unicode.IsSpace(r):
		c |= isSpace
	}
	if r == '\r' || r == '\n' {
		c |= isCRLF
	}
	return c
}

// at returns the class and size of the character at i of s.
func at(s string, i int) (class, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return classify(r), n
}

// symbolPrefix reports whether c is [^\r\n\p{L}\p{N}].
func symbolPrefix(c class) bool { return c&(isLetter|isNumber|isCRLF) == 0 }

// symbol reports whether c is [^\s\p{L}\p{N}].
func symbol(c class) bool { return c&(isLetter|isNumber|isSpace) == 0 }

// splitter finds the end of the piece starting at i of s.
type splitter func(s string, i int) int

// splitO200k cuts as o200k_base's pattern does. Alternatives are tried in
// the pattern's order; an optional [^\r\n\p{L}\p{N}] prefix is tried taken,
// then (as a backtracking engine does) not.
func splitO200k(s string, i int) int {
	c, n := at(s, i)
	withPrefix := symbolPrefix(c)
	if withPrefix {
		if end := upperLower(s, i+n); end > i+n {
			return contraction(s, end)
		}
	}
	if end := upperLower(s, i); end > i {
		return contraction(s, end)
	}
	if withPrefix {
		if end := run(s, i+n, isUpper); end > i+n {
			return contraction(s, run(s, end, isLower))
		}
	}
	if end := run(s, i, isUpper); end > i {
		return contraction(s, run(s, end, isLower))
	}
	if end := digits(s, i); end > i {
		return end
	}
	if end := symbols(s, i, true); end > i {
		return end
	}
	return spaces(s, i)
}

// splitCL100k cuts as cl100k_base's pattern does.
func splitCL100k(s string, i int) int {
	if end := contraction(s, i); end > i {
		return end
	}
	c, n := at(s, i)
	if symbolPrefix(c) {
		if end := run(s, i+n, isLetter); end > i+n {
			return end
		}
	}
	if end := run(s, i, isLetter); end > i {
		return end
	}
	if end := digits(s, i); end > i {
		return end
	}
	if end := symbols(s, i, false); end > i {
		return end
	}
	return spaces(s, i)
}

// run returns the end of the longest run from i of characters in want.
func run(s string, i int, want class) int {
	for i < len(s) {
		c, n := at(s, i)
		if c&want == 0 {
			break
		}
		i += n
	}
	return i
}

// upperLower matches [U]*[L]+ at i as a backtracking engine does: U* as
// long as it can, giving back characters until L+ can start.
func upperLower(s string, i int) int {
	uEnd := run(s, i, isUpper)
	if uEnd < len(s) {
		if c, _ := at(s, uEnd); c&isLower != 0 {
			return run(s, uEnd, isLower)
		}
	}
	// Back off U* to the last character that is also in L; L+ then takes
	// it alone: every U character after it is not in L.
	last := -1
	for j := i; j < uEnd; {
		c, n := at(s, j)
		if c&isLower != 0 {
			last = j + n
		}
		j += n
	}
	if last < 0 {
		return i
	}
	return last
}

// contraction returns the end of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or i.
func contraction(s string, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return i
	}
	lower := func(b byte) byte { return b | 0x20 }
	switch lower(s[i+1]) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && lower(s[i+2]) == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && lower(s[i+2]) == 'l' {
			return i + 3
		}
	}
	return i
}

// digits matches \p{N}{1,3} at i.
func digits(s string, i int) int {
	j := i
	for k := 0; k < 3 && j < len(s); k++ {
		c, n := at(s, j)
		if c&isNumber == 0 {
			break
		}
		j += n
	}
	return j
}

// symbols matches " ?[^\s\p{L}\p{N}]+[\r\n]*" at i, with "/" in the tail
// too when slash is set (o200k_base).
func symbols(s string, i int, slash bool) int {
	j := i
	if s[j] == ' ' {
		j++
	}
	start := j
	for j < len(s) {
		c, n := at(s, j)
		if !symbol(c) {
			break
		}
		j += n
	}
	if j == start {
		return i
	}
	for j < len(s) && (s[j] == '\r' || s[j] == '\n' || (slash && s[j] == '/')) {
		j++
	}
	return j
}

// spaces matches \s*[\r\n]+ | \s+(?!\S) | \s+ at i.
func spaces(s string, i int) int {
	end, lastCRLF := i, -1
	for end < len(s) {
		c, n := at(s, end)
		if c&isSpace == 0 {
			break
		}
		if c&isCRLF != 0 {
			lastCRLF = end + n
		}
		end += n
	}
	switch {
	case lastCRLF > 0:
		return lastCRLF
	case end == len(s):
		return end
	}
	if end == i { // not a space: never reached, every other character starts a piece above
		_, n := utf8.DecodeRuneInString(s[i:])
		return i + n
	}
	// Leave the last space to the piece that follows, unless it is the only
	// one.
	if _, n := utf8.DecodeLastRuneInString(s[i:end]); end-n > i {
		return end - n
	}
	return end
}

// bpe is an encoding's vocabulary and splitter, for counting.
type bpe struct {
	ranks map[string]int
	split splitter
}

// maxMergeBytes bounds the piece tiktoken's merge runs on. The merge is
// quadratic in the piece's length, and the splitter makes pieces as long as
// a run of letters, spaces or symbols in the text: a client could send one
// piece of megabytes. A longer piece is merged in chunks of at most
// maxMergeBytes (cut at character boundaries), no token spanning two
// chunks, which bounds the work to about maxMergeBytes steps per byte. The
// count of a chunked piece is then an estimate, within about one token per
// cut of the exact count, either way (bpe_test.go checks it): under 3%
// of a piece of letters, where a token is 2 to 4 bytes. Natural text has no
// such pieces (words are shorter), and the usage the upstream reports
// settles the real cost.
const maxMergeBytes = 128

// count returns the number of tokens of s.
func (e *bpe) count(s string) int {
	n, _ := e.countOps(s)
	return n
}

// countOps is count, also returning the steps its merges took (the parts
// they scanned), which tests bound.
func (e *bpe) countOps(s string) (tokens, ops int) {
	var parts []part
	for i := 0; i < len(s); {
		end := e.split(s, i)
		piece := s[i:end]
		if _, ok := e.ranks[piece]; ok {
			tokens++
			i = end
			continue
		}
		for len(piece) > 0 {
			chunk := piece[:chunkEnd(piece)]
			piece = piece[len(chunk):]
			if _, ok := e.ranks[chunk]; ok {
				tokens++
				continue
			}
			var n, steps int
			n, steps, parts = e.merge(chunk, parts[:0])
			tokens += n
			ops += steps
		}
		i = end
	}
	return tokens, ops
}

// chunkEnd returns the end of piece's first chunk: all of it if it is at
// most maxMergeBytes long, else the last character boundary at or before
// maxMergeBytes (at least one character).
func chunkEnd(piece string) int {
	if len(piece) <= maxMergeBytes {
		return len(piece)
	}
	end := maxMergeBytes
	for end > 0 && !utf8.RuneStart(piece[end]) {
		end--
	}
	if end == 0 {
		_, n := utf8.DecodeRuneInString(piece)
		return n
	}
	return end
}

// part is a part of a piece being merged: where it starts, and the rank of
// the pair it starts.
type part struct {
	start int
	rank  int
}

const noRank = math.MaxInt

// merge applies tiktoken's byte-pair merge to piece (repeatedly joining the
// adjacent pair of lowest rank, the leftmost on a tie) and returns how many
// tokens are left, and the steps it took (the parts it scanned). parts is
// scratch space, returned for reuse.
func (e *bpe) merge(piece string, parts []part) (int, int, []part) {
	if len(piece) == 1 {
		return 1, 1, parts
	}
	rank := func(a, b int) int {
		if r, ok := e.ranks[piece[a:b]]; ok {
			return r
		}
		return noRank
	}
	for i := 0; i+1 < len(piece); i++ {
		parts = append(parts, part{i, rank(i, i+2)})
	}
	parts = append(parts, part{len(piece) - 1, noRank}, part{len(piece), noRank})
	pairRank := func(i int) int {
		if i+3 < len(parts) {
			return rank(parts[i].start, parts[i+3].start)
		}
		return noRank
	}
	steps := len(parts)
	for {
		steps += len(parts)
		best, min := -1, noRank
		for i := 0; i+1 < len(parts); i++ {
			if parts[i].rank < min {
				best, min = i, parts[i].rank
			}
		}
		if best < 0 {
			break
		}
		if best > 0 {
			parts[best-1].rank = pairRank(best - 1)
		}
		parts[best].rank = pairRank(best)
		parts = append(parts[:best+1], parts[best+2:]...)
	}
	return len(parts) - 1, steps, parts
}
