package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestQuotasDocCommands runs the admin commands of docs/quotas.md's
// walk-through, in order, against a tokenlimit serve started with the
// page's configuration: each must succeed as written (the documented key
// id replaced by the one the server gave). The proxy's calls, which need
// an upstream, are not run here.
func TestQuotasDocCommands(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/quotas.md")
	if err != nil {
		t.Fatal(err)
	}
	cfg := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindSubmatch(doc)
	if cfg == nil {
		t.Fatal("docs/quotas.md has no yaml block")
	}
	path := filepath.Join(t.TempDir(), "quotas.yaml")
	if err := os.WriteFile(path, cfg[1], 0o600); err != nil {
		t.Fatal(err)
	}
	_, base, _ := startChild(t, []string{"TOKENLIMIT_ALERT_SECRET=s"}, "serving HTTP",
		"serve", "--config", path, "--listen", "127.0.0.1:0", "--grpc-listen", "", "--admin-token", "secret")
	keyID := regexp.MustCompile(`key_[0-9a-f]{24}`)
	var created string
	ran := 0
	for _, line := range strings.Split(string(doc), "\n") {
		cmd, ok := strings.CutPrefix(line, "$ tokenlimit ")
		if !ok || strings.HasPrefix(cmd, "serve ") || strings.HasPrefix(cmd, "proxy ") {
			continue
		}
		args := shellWords(t, cmd)
		for i := range args {
			args[i] = keyID.ReplaceAllString(args[i], created)
		}
		args = append(args, "--server", base, "--admin-token", "secret")
		var out, errb bytes.Buffer
		if err := Run(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("tokenlimit %s: %v\n%s", cmd, err, errb.String())
		}
		ran++
		if strings.HasPrefix(cmd, "keys create ") {
			var k struct{ ID string }
			if err := json.Unmarshal(out.Bytes(), &k); err != nil || k.ID == "" {
				t.Fatalf("tokenlimit %s printed %q", cmd, out.String())
			}
			created = k.ID
		}
	}
	if ran < 5 {
		t.Fatalf("ran %d commands of docs/quotas.md, want its 5 admin commands at least", ran)
	}
}

// shellWords splits a command line as sh does for words, single and
// double quotes, and a trailing # comment; nothing else is expanded.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			end := strings.IndexByte(line[i+1:], c)
			if end < 0 {
				t.Fatalf("unbalanced quote in %q", line)
			}
			cur.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return words
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}
