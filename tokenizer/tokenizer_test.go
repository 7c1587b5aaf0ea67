package tokenizer

import (
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
)

// testTokenizer is shared by the package's tests: loading an encoding takes a
// fraction of a second and tens of MB.
var testTokenizer = New()

func TestEncodingFor(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]Encoding{
		"gpt-4o": O200kBase, "gpt-4o-mini-2024-07-18": O200kBase, "gpt-4.1-nano": O200kBase,
		"gpt-4.5-preview": O200kBase, "gpt-5": O200kBase, "o1": O200kBase, "o3-mini": O200kBase,
		"o4-mini": O200kBase, "chatgpt-4o-latest": O200kBase,
		"gpt-4": CL100kBase, "gpt-4-0613": CL100kBase, "gpt-4-turbo": CL100kBase, "gpt-3.5-turbo": CL100kBase,
		"text-embedding-3-small": CL100kBase, "text-embedding-ada-002": CL100kBase,
		"llama-3-70b": DefaultEncoding, "": DefaultEncoding,
	} {
		if got := EncodingFor(model); got != want {
			t.Errorf("EncodingFor(%q) = %s, want %s", model, got, want)
		}
	}
}

// TestCountKnownValues compares with tiktoken (Python) on the same texts.
func TestCountKnownValues(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		model, text string
		want        int64
	}{
		{"gpt-4", "hello world", 2},
		{"gpt-4o", "hello world", 2},
		{"gpt-4", "hallo world!", 4},
		{"gpt-4o", "hallo world!", 4},
		{"gpt-4", "你好世界！", 6},
		{"gpt-4o", "你好世界！", 3},
		{"gpt-4", "안녕하세요 세계!", 10},
		{"gpt-4o", "안녕하세요 세계!", 4},
		{"gpt-4", "Привет мир!", 6},
		{"gpt-4o", "Привет мир!", 4},
		{"gpt-4", "", 0},
		// Special tokens in text count as text: <|endoftext|> is 7 tokens.
		{"gpt-4", "<|endoftext|>", 7},
	} {
		got, err := testTokenizer.Count(tt.model, tt.text)
		if err != nil || got != tt.want {
			t.Errorf("Count(%q, %q) = %d, %v; want %d", tt.model, tt.text, got, err, tt.want)
		}
	}
}

// failingTransport fails every request and records that one was made.
type failingTransport struct {
	mu   sync.Mutex
	urls []string
}

func (f *failingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.urls = append(f.urls, r.URL.String())
	return nil, http.ErrNotSupported
}

// TestTokenizerIsOffline loads both encodings with the default HTTP
// transport replaced by one that fails and records, and tiktoken's disk
// cache pointed at an empty directory: no request is made and nothing is
// written. (Not parallel: it swaps http.DefaultTransport for its duration,
// before the parallel tests run.)
func TestTokenizerIsOffline(t *testing.T) {
	ft := &failingTransport{}
	saved := http.DefaultTransport
	http.DefaultTransport = ft
	defer func() { http.DefaultTransport = saved }()
	cache := t.TempDir()
	t.Setenv("TIKTOKEN_CACHE_DIR", cache)
	t.Setenv("DATA_GYM_CACHE_DIR", cache)

	fresh := New()
	if err := fresh.Preload(O200kBase, CL100kBase); err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"gpt-4o", "gpt-4", "unknown-model"} {
		if n, err := fresh.Count(model, strings.Repeat(" offline", 10)); err != nil || n != 10 {
			t.Errorf("Count(%s) = %d, %v; want 10", model, n, err)
		}
	}
	if len(ft.urls) > 0 {
		t.Errorf("the tokenizer made HTTP requests: %v", ft.urls)
	}
	if entries, _ := os.ReadDir(cache); len(entries) > 0 {
		t.Errorf("the tokenizer wrote %d files to its cache directory", len(entries))
	}
}
