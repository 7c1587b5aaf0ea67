package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
	"github.com/pkoukk/tiktoken-go"
)

// The fast counter is checked against the reference: the encodings' split
// patterns run by a backtracking regular-expression engine (regexp2, as
// tiktoken-go does), and tiktoken-go's encoder over the same vocabulary.

// alphabet mixes every class the patterns tell apart: ASCII letters of both
// cases, digits, spaces, tabs, CR and LF, apostrophes and contraction
// letters, punctuation and "/", accented letters (Ll, Lu), a titlecase
// letter (Lt), a modifier letter (Lm), CJK (Lo), a combining mark (Mn),
// other numbers (Nd, Nl, No), Unicode spaces (NBSP, em space, ideographic
// space, NEL, line separator), an emoji, a zero-width space (Cf).
var alphabet = []string{
	"a", "b", "z", "A", "B", "Z", "0", "7", " ", " ", " ", "\t", "\n", "\r", "\r\n", "'", "'s", "'S", "'re", "'LL", "'d", "'x",
	".", ",", "!", "?", "-", "/", "(", "\"", "é", "É", "ǅ", "ʰ", "你", "好", "\u0301", "٣", "Ⅻ", "½", "\u00a0", "\u2003", "\u3000",
	"\u0085", "\u2028", "😀", "\u200b", "hello", " world", "The", "DON'T", "x86", "1234567", "  \n ",
}

func randomText(r *rand.Rand) string {
	var sb strings.Builder
	for range 1 + r.IntN(24) {
		sb.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return sb.String()
}

var sampleTexts = []string{
	"[\n {\"role\": \"system\", \"name\": \"example_user\", \"content\": \"Let's circle back when we have more bandwidth.\"}\n]",
	`{"type": "function", "function": {"name": "get_current_weather", "parameters": {"enum": ["celsius", "fahrenheit"]}}}`, "hello world", "Hello, World! It's 2026; we're testing don't/won't/I'LL.",
	"你好世界！こんにちは世界！안녕하세요 세계! Привет мир! ¡Hola mundo! Hej världen!",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n\n\n   \n", "  leading and trailing   ", "a\r\n\r\nb", "1234567890 3.14159",
	"ÅNGSTRÖM façade ǅemal ʰa naïve e\u0301 😀👍🏽 x\u200by",
}

// regexpPieces splits text with the pattern, as tiktoken-go does.
func regexpPieces(t *testing.T, re *regexp2.Regexp, text string) []string {
	runes := []rune(text)
	var pieces []string
	m, err := re.FindStringMatch(text)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		pieces = append(pieces, string(runes[m.Index:m.Index+m.Length]))
	}
	if err != nil {
		t.Fatal(err)
	}
	return pieces
}

func splitPieces(split splitter, text string) []string {
	var pieces []string
	for i := 0; i < len(text); {
		end := split(text, i)
		pieces = append(pieces, text[i:end])
		i = end
	}
	return pieces
}

func TestSplittersMatchThePatterns(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for name, spec := range encodingSpecs {
		re := regexp2.MustCompile(spec.pattern, regexp2.None)
		texts := append([]string(nil), sampleTexts...)
		for range 20000 {
			texts = append(texts, randomText(r))
		}
		failures := 0
		for _, text := range texts {
			want, got := regexpPieces(t, re, text), splitPieces(spec.split, text)
			if strings.Join(want, "|") != strings.Join(got, "|") {
				t.Errorf("%s: split(%q) = %q, the pattern gives %q", name, text, got, want)
				if failures++; failures > 10 {
					t.FailNow()
				}
			}
		}
	}
}

func TestCountMatchesTiktokenGo(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for name, spec := range encodingSpecs {
		enc, err := testTokenizer.encoding(name)
		if err != nil {
			t.Fatal(err)
		}
		core, err := tiktoken.NewCoreBPE(enc.ranks, spec.special, spec.pattern)
		if err != nil {
			t.Fatal(err)
		}
		ref := tiktoken.NewTiktoken(core, &tiktoken.Encoding{Name: string(name), PatStr: spec.pattern, MergeableRanks: enc.ranks, SpecialTokens: spec.special}, nil)
		texts := append([]string(nil), sampleTexts...)
		for range 5000 {
			texts = append(texts, randomText(r))
		}
		for _, text := range texts {
			if got, want := enc.count(text), len(ref.EncodeOrdinary(text)); got != want {
				t.Errorf("%s: count(%q) = %d, tiktoken-go says %d", name, text, got, want)
			}
		}
	}
}

// longPieces are texts the splitter makes one piece of, as long as n bytes:
// the inputs on which tiktoken's merge is quadratic.
func longPieces(n int) map[string]string {
	return map[string]string{
		"letters": strings.Repeat("a", n),
		"mixed":   strings.Repeat("Zqxjkv", n/6),
		"spaces":  strings.Repeat(" ", n),
		"symbols": strings.Repeat("#%", n/2),
		"cjk":     strings.Repeat("你好世", n/9),
	}
}

// TestCountWorkIsLinear bounds the merge's steps per byte of a text made of
// one long piece: without a bound on the piece merged, a run of n
// letters took about n²/2 steps (5 s of CPU for 100 KB) before any limit was
// checked.
func TestCountWorkIsLinear(t *testing.T) {
	t.Parallel()
	for name := range encodingSpecs {
		enc, err := testTokenizer.encoding(name)
		if err != nil {
			t.Fatal(err)
		}
		for kind, text := range longPieces(32 << 10) {
			tokens, ops := enc.countOps(text)
			if limit := len(text) * 150; ops > limit {
				t.Errorf("%s %s: counting %d bytes took %d merge steps, want at most %d", name, kind, len(text), ops, limit)
			}
			if tokens < len(text)/maxMergeBytes || tokens > len(text) {
				t.Errorf("%s %s: %d bytes counted as %d tokens", name, kind, len(text), tokens)
			}
		}
	}
}

// TestChunkedCountNearExact checks that a piece merged in chunks counts
// about as tiktoken-go does over the whole piece: within one token per cut
// of it, either way.
func TestChunkedCountNearExact(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	for name, spec := range encodingSpecs {
		enc, err := testTokenizer.encoding(name)
		if err != nil {
			t.Fatal(err)
		}
		core, err := tiktoken.NewCoreBPE(enc.ranks, spec.special, spec.pattern)
		if err != nil {
			t.Fatal(err)
		}
		ref := tiktoken.NewTiktoken(core, &tiktoken.Encoding{Name: string(name), PatStr: spec.pattern, MergeableRanks: enc.ranks, SpecialTokens: spec.special}, nil)
		texts := longPieces(3000)
		for i := range 20 {
			var sb strings.Builder
			for range 1000 + r.IntN(2000) {
				sb.WriteByte("abcdefghijklmnopqrstuvwxyz"[r.IntN(26)])
			}
			texts[fmt.Sprint("random ", i)] = sb.String()
		}
		for kind, text := range texts {
			got, want := enc.count(text), len(ref.EncodeOrdinary(text))
			cuts := len(text) / maxMergeBytes
			if got < want-cuts || got > want+cuts {
				t.Errorf("%s %s (%d bytes): count = %d, tiktoken-go says %d (want within [%d, %d])", name, kind, len(text), got, want, want-cuts, want+cuts)
			}
		}
	}
}
