package tokenlimit_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDependenciesDocMatchesGoMod checks that docs/dependencies.md names
// every module go.mod requires, and no Go module go.mod does not have
// (tools installed with go install and npm packages are marked as such).
func TestDependenciesDocMatchesGoMod(t *testing.T) {
	t.Parallel()
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("docs/dependencies.md")
	if err != nil {
		t.Fatal(err)
	}
	required := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(\S+) v\S+`).FindAllStringSubmatch(string(gomod), -1) {
		required[m[1]] = true
	}
	named := map[string]bool{}
	for line := range strings.Lines(string(doc)) {
		if strings.Contains(line, "(a tool") || strings.Contains(line, "(npm") {
			continue
		}
		for _, m := range regexp.MustCompile("`([a-z0-9.-]+(?:/[A-Za-z0-9._-]+)+)`").FindAllStringSubmatch(line, -1) {
			named[m[1]] = true
		}
	}
	// The doc may shorten github.com/owner/name to owner/name.
	known := func(m string) bool { return named[m] || named[strings.TrimPrefix(m, "github.com/")] }
	for m := range required {
		if !known(m) {
			t.Errorf("go.mod requires %s; docs/dependencies.md does not say why", m)
		}
	}
	for m := range named {
		if strings.Count(m, "/") == 0 || strings.ContainsAny(m, " ") || !strings.Contains(strings.SplitN(m, "/", 2)[0], ".") && !required["github.com/"+m] {
			continue // a path of this repository such as tokenizer/bpe.go, not a module
		}
		if !required[m] && !required["github.com/"+m] {
			t.Errorf("docs/dependencies.md names %s, which go.mod does not require", m)
		}
	}
}
