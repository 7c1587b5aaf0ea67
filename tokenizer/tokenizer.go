// Package tokenizer counts tokens the way OpenAI's models do, offline and
// without building the tokens: a hand-written splitter that cuts text where
// the encodings' split patterns do, and tiktoken's byte-pair merge over each
// piece. The vocabularies are embedded in the binary.
package tokenizer

import (
	"fmt"
	"strings"
	"sync"

	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// Encoding names a BPE encoding of OpenAI's models.
type Encoding string

// The encodings the Tokenizer knows. Their vocabularies are embedded in the
// binary (github.com/pkoukk/tiktoken-go-loader), so counting never touches
// the network or the disk.
const (
	// O200kBase is the encoding of gpt-4o, gpt-4.1, gpt-4.5, gpt-5 and the
	// o-series reasoning models.
	O200kBase Encoding = "o200k_base"
	// CL100kBase is the encoding of gpt-4, gpt-3.5-turbo and the
	// text-embedding-3 and ada-002 embedding models.
	CL100kBase Encoding = "cl100k_base"
	// DefaultEncoding counts models the Tokenizer does not know (other
	// vendors' models behind an OpenAI-compatible API): an estimate.
	DefaultEncoding = O200kBase
)

// encodingSpecs are the two encodings' split patterns and special tokens,
// as in tiktoken's openai_public.py. The splitters of bpe.go cut text where
// the patterns do (bpe_test.go checks them against the patterns); special
// tokens are not needed to count text, in which they are ordinary text.
var encodingSpecs = map[Encoding]struct {
	pattern string
	special map[string]int
	split   splitter
}{
	O200kBase: {
		pattern: strings.Join([]string{
			`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
			`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
			`\p{N}{1,3}`,
			` ?[^\s\p{L}\p{N}]+[\r\n/]*`,
			`\s*[\r\n]+`,
			`\s+(?!\S)`,
			`\s+`,
		}, "|"),
		special: map[string]int{"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
		split:   splitO200k,
	},
	CL100kBase: {
		pattern: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
		special: map[string]int{
			"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
			"<|fim_suffix|>": 100260, "<|endofprompt|>": 100276,
		},
		split: splitCL100k,
	},
}

// EncodingFor returns the encoding of model: O200kBase for gpt-4o, gpt-4.1,
// gpt-4.5, gpt-5, chatgpt-* and the o-series (o1, o3, o4-mini...);
// CL100kBase for the other gpt-4 and gpt-3.5 models and OpenAI's embedding
// models; DefaultEncoding for anything else.
func EncodingFor(model string) Encoding {
	m := strings.ToLower(model)
	switch {
	case hasAnyPrefix(m, "gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-", "o1", "o3", "o4", "gpt-oss"):
		return O200kBase
	case hasAnyPrefix(m, "gpt-4", "gpt-3.5", "text-embedding-", "gpt-35"):
		return CL100kBase
	}
	return DefaultEncoding
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// Tokenizer counts tokens the way OpenAI's models do, offline, without
// building the tokens: about 30 µs per 1,000 tokens of English. An
// encoding's vocabulary is loaded on its first use (about 70 ms and 10 MB of
// heap for o200k_base) or by Preload. The zero value is not usable; call
// New. A Tokenizer is safe for concurrent use.
type Tokenizer struct {
	encodings map[Encoding]*lazyEncoding
}

type lazyEncoding struct {
	once sync.Once
	bpe  *bpe
	err  error
}

// New returns a tokenizer that loads each encoding on first use.
func New() *Tokenizer {
	t := &Tokenizer{encodings: map[Encoding]*lazyEncoding{}}
	for name := range encodingSpecs {
		t.encodings[name] = &lazyEncoding{}
	}
	return t
}

// Preload loads the named encodings now, so that the first requests do not
// pay for it.
func (t *Tokenizer) Preload(encodings ...Encoding) error {
	for _, e := range encodings {
		if _, err := t.encoding(e); err != nil {
			return err
		}
	}
	return nil
}

// Load loads the encoding of model (see EncodingFor) if it is not loaded
// yet, and returns it; once it returns no error, Count on model cannot fail.
func (t *Tokenizer) Load(model string) (Encoding, error) {
	e := EncodingFor(model)
	_, err := t.encoding(e)
	return e, err
}

// encoding returns the loaded encoding e.
func (t *Tokenizer) encoding(e Encoding) (*bpe, error) {
	lazy, ok := t.encodings[e]
	if !ok {
		return nil, fmt.Errorf("tokenizer: unknown encoding %q", e)
	}
	lazy.once.Do(func() { lazy.bpe, lazy.err = load(e) })
	return lazy.bpe, lazy.err
}

// load builds encoding e from the vocabulary embedded in
// tiktoken-go-loader. Nothing here can reach the network: tiktoken-go's
// default loader, which downloads vocabularies and caches them on disk, is
// never used.
func load(e Encoding) (*bpe, error) {
	ranks, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe(string(e) + ".tiktoken")
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load %s: %w", e, err)
	}
	return &bpe{ranks: ranks, split: encodingSpecs[e].split}, nil
}

// Count returns the number of tokens of text under model's encoding. Special
// tokens such as <|endoftext|> in text count as ordinary text, as they do in
// the API.
func (t *Tokenizer) Count(model, text string) (int64, error) {
	if text == "" {
		return 0, nil
	}
	enc, err := t.encoding(EncodingFor(model))
	if err != nil {
		return 0, err
	}
	return int64(enc.count(text)), nil
}
