package tokenlimit_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// consumerMain is a library user's program: the engine on the embedded
// store and on Redis through either adapter, and nothing else.
const consumerMain = `package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
)

func main() {
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		panic(err)
	}
	stores := []tokenlimit.Store{mem}
	if s, err := redisstore.New(goredisclient.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})), redisstore.Options{}); err == nil {
		stores = append(stores, s)
	}
	if c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:1"}, ForceSingleClient: true}); err == nil {
		if s, err := redisstore.New(rueidisclient.New(c), redisstore.Options{}); err == nil {
			stores = append(stores, s)
		}
	}
	l, err := tokenlimit.NewLimiter(stores[0])
	if err != nil {
		panic(err)
	}
	res, err := l.AllowN(context.Background(), "user=alice", tokenlimit.TokenBucketLimit(10, 2, time.Second), 3)
	fmt.Println(len(stores), res.Allowed, err)
}
`

// appOnly are the service's dependencies a library user must never get,
// named so that the test fails with them even if the modules of this
// repository stopped requiring them.
var appOnly = []string{
	"google.golang.org/grpc",
	"github.com/envoyproxy/go-control-plane/envoy",
	"github.com/chromedp/chromedp",
	"github.com/openai/openai-go/v3",
	"github.com/spf13/cobra",
}

// goIn runs the go command in dir outside any workspace and returns its
// standard output.
func goIn(t *testing.T, dir string, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off"}, env...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.Bytes())
	}
	return out
}

// workspaceModules returns the directories go.work uses, relative to the
// repository root ("." for the root module).
func workspaceModules(t *testing.T) []string {
	t.Helper()
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(goIn(t, ".", nil, "work", "edit", "-json", "go.work"), &work); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, u := range work.Use {
		dirs = append(dirs, filepath.Clean(u.DiskPath))
	}
	return dirs
}

// moduleGraph returns every module path in dir's module graph (go mod
// graph, both ends of every edge, versions dropped).
func moduleGraph(t *testing.T, dir string, env ...string) map[string]bool {
	t.Helper()
	mods := map[string]bool{}
	for _, f := range strings.Fields(string(goIn(t, dir, env, "mod", "graph"))) {
		path, _, _ := strings.Cut(f, "@")
		mods[path] = true
	}
	return mods
}

// TestLibraryConsumerModuleGraph builds a throwaway module that imports
// only the root package, memstore, redisstore and both adapters, with the
// repository replaced in, and requires that its module graph holds none of
// the modules only the service, its tools, its tests or the benchmarks need:
// every module in a nested module's graph but not in the root module's,
// grpc, go-control-plane, chromedp, openai-go and cobra by name.
func TestLibraryConsumerModuleGraph(t *testing.T) {
	t.Parallel()
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	rootGraph := moduleGraph(t, repo)
	appGraph := map[string]bool{}
	for _, dir := range workspaceModules(t) {
		if dir == "." {
			continue
		}
		for m := range moduleGraph(t, filepath.Join(repo, dir)) {
			if !rootGraph[m] && !strings.HasPrefix(m, "github.com/tokenlimit/tokenlimit") {
				appGraph[m] = true
			}
		}
	}
	for _, m := range appOnly {
		if !appGraph[m] {
			t.Errorf("%s is in no nested module's graph but the root's, or in none at all", m)
		}
	}

	dir := t.TempDir()
	gomod := "module example.com/consumer\n\ngo 1.26.0\n\n" +
		"require github.com/tokenlimit/tokenlimit v0.0.0-00010101000000-000000000000\n\n" +
		"replace github.com/tokenlimit/tokenlimit => " + repo + "\n"
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(consumerMain)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Everything the consumer builds is in the root module's graph, which
	// building this module has already downloaded: no network. (go mod
	// tidy would also want the modules of the dependencies' own tests.)
	offline := []string{"GOPROXY=off", "GOFLAGS=-mod=mod"}
	goIn(t, dir, offline, "build", "-o", filepath.Join(dir, "consumer"), ".")

	graph := moduleGraph(t, dir, offline...)
	var found []string
	for m := range graph {
		if appGraph[m] || slices.Contains(appOnly, m) || strings.HasPrefix(m, "github.com/tokenlimit/tokenlimit/") {
			found = append(found, m)
		}
	}
	slices.Sort(found)
	if len(found) > 0 {
		t.Errorf("a module importing only the library has the service's dependencies in its go mod graph: %v", found)
	}
	if !graph["github.com/tokenlimit/tokenlimit"] || !graph["github.com/redis/rueidis"] {
		t.Errorf("the consumer's graph lacks tokenlimit or rueidis: %v", graph)
	}
}

// TestWorkspaceUsesEveryModule requires that go.work uses every go.mod of
// the repository, so that scripts/test.sh (which tests what go.work uses)
// leaves none out, and that each nested module resolves on its own, outside
// the workspace (its replace directives name every module of this
// repository it needs).
func TestWorkspaceUsesEveryModule(t *testing.T) {
	t.Parallel()
	var found []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			found = append(found, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	used := workspaceModules(t)
	slices.Sort(found)
	slices.Sort(used)
	if !slices.Equal(found, used) {
		t.Fatalf("go.work uses %v; the repository's modules are %v", used, found)
	}
	for _, dir := range used {
		goIn(t, dir, nil, "list", "-deps", "-test", "./...")
	}
}
