package tokenlimit_test

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goMods returns, for every module go.work uses (by directory, "." for
// the root), the modules its go.mod requires directly and all it requires,
// the modules of this repository left out.
func goMods(t *testing.T) (direct, all map[string]map[string]bool) {
	t.Helper()
	direct, all = map[string]map[string]bool{}, map[string]map[string]bool{}
	for _, dir := range workspaceModules(t) {
		var mod struct {
			Require []struct {
				Path     string
				Indirect bool
			}
		}
		if err := json.Unmarshal(goIn(t, ".", nil, "mod", "edit", "-json", filepath.Join(dir, "go.mod")), &mod); err != nil {
			t.Fatal(err)
		}
		direct[dir], all[dir] = map[string]bool{}, map[string]bool{}
		for _, r := range mod.Require {
			if strings.HasPrefix(r.Path, "github.com/tokenlimit/tokenlimit") {
				continue
			}
			all[dir][r.Path] = true
			if !r.Indirect {
				direct[dir][r.Path] = true
			}
		}
	}
	return direct, all
}

// backticked is every `a.b/c`-shaped name in s.
var backticked = regexp.MustCompile("`([a-z0-9.-]+(?:/[A-Za-z0-9._-]+)+)`")

// TestDependenciesDocMatchesGoMod checks that docs/dependencies.md names
// every module a go.mod of the repository requires, and no Go module none
// requires (tools installed with go install and npm packages are marked as
// such), and that its table of the repository's modules lists exactly each
// one's direct requirements.
func TestDependenciesDocMatchesGoMod(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/dependencies.md")
	if err != nil {
		t.Fatal(err)
	}
	direct, all := goMods(t)
	required := map[string]bool{}
	for _, reqs := range all {
		for m := range reqs {
			required[m] = true
		}
	}
	// The doc may shorten github.com/owner/name to owner/name.
	full := func(m string) string {
		if !required[m] && required["github.com/"+m] {
			return "github.com/" + m
		}
		return m
	}
	named := map[string]bool{}
	listed := map[string]map[string]bool{}
	for line := range strings.Lines(string(doc)) {
		if strings.Contains(line, "(a tool") || strings.Contains(line, "(npm") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) == 5 {
			dir := strings.TrimSuffix(strings.Trim(strings.TrimSpace(cells[1]), "`"), "` (root)")
			if _, ok := direct[dir]; ok {
				listed[dir] = map[string]bool{}
				for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
					listed[dir][full(m[1])] = true
				}
			}
		}
		for _, m := range backticked.FindAllStringSubmatch(line, -1) {
			named[full(m[1])] = true
		}
	}
	for m := range required {
		if !named[m] {
			t.Errorf("a go.mod requires %s; docs/dependencies.md does not say why", m)
		}
	}
	for m := range named {
		if strings.Count(m, "/") == 0 || !strings.Contains(strings.SplitN(m, "/", 2)[0], ".") || strings.HasPrefix(m, "github.com/tokenlimit/") {
			continue // a path of this repository such as tokenizer/bpe.go, not a module
		}
		if !required[m] {
			t.Errorf("docs/dependencies.md names %s, which no go.mod requires", m)
		}
	}
	for dir, reqs := range direct {
		if !maps.Equal(reqs, listed[dir]) {
			t.Errorf("docs/dependencies.md lists for module %s %v; its go.mod requires directly %v", dir, slices.Sorted(maps.Keys(listed[dir])), slices.Sorted(maps.Keys(reqs)))
		}
	}
}

// TestREADMELayoutMatchesTree checks that the README's layout table names
// every package of every module once, each with the module it is in ("root"
// for the library), and nothing that is not a package ("dir/..." stands for
// every package under dir).
func TestREADMELayoutMatchesTree(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	const repo = "github.com/tokenlimit/tokenlimit"
	var patterns []string
	for _, dir := range workspaceModules(t) {
		patterns = append(patterns, "./"+filepath.ToSlash(filepath.Join(dir, "...")))
	}
	work, err := filepath.Abs("go.work")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}} {{.Module.Path}}"}, patterns...)...)
	cmd.Env = append(os.Environ(), "GOWORK="+work)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	modOf := map[string]string{} // package directory => module directory
	for line := range strings.Lines(string(out)) {
		pkg, mod, _ := strings.Cut(strings.TrimSpace(line), " ")
		rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, repo), "/") }
		dir, m := rel(pkg), rel(mod)
		if dir == "" {
			dir = "."
		}
		if m == "" {
			m = "root"
		}
		modOf[dir] = m
	}
	section := string(readme)
	section = section[strings.Index(section, "## Layout"):]
	section = section[:strings.Index(section[1:], "\n## ")+1]
	seen := map[string]int{}
	for line := range strings.Lines(section) {
		cells := strings.Split(line, "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		mod := strings.Trim(strings.TrimSpace(cells[2]), "`")
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(strings.Split(cells[1], "(")[0], -1) {
			name := m[1]
			matched := 0
			for dir, dmod := range modOf {
				if dir == name || strings.HasSuffix(name, "/...") && (dir == strings.TrimSuffix(name, "/...") || strings.HasPrefix(dir, strings.TrimSuffix(name, "..."))) {
					matched++
					seen[dir]++
					if dmod != mod {
						t.Errorf("README: %s is in module %s, not %s", dir, dmod, mod)
					}
				}
			}
			if matched == 0 {
				t.Errorf("README's layout names %s, which is no package", name)
			}
		}
	}
	for dir := range modOf {
		if seen[dir] != 1 {
			t.Errorf("README's layout names package %s %d times, not once", dir, seen[dir])
		}
	}
}
