package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// releaseVersion is the version the release test publishes to its local
// module proxy.
const releaseVersion = "v0.0.0-releasetest"

// A release build does not need the nested modules' replace directives:
// scripts/release.sh modules rewrites every go.mod to require this
// repository's modules at the release's version, and cmd/tokenlimit then
// loads from a module proxy holding those modules (a local one here, as
// proxy.golang.org would hold the tagged ones), with no workspace and no
// replace.
func TestReleaseBuildNeedsNoReplace(t *testing.T) {
	repo := copyRepo(t)
	if out, err := exec.Command(filepath.Join(repo, "scripts", "release.sh"), "modules", releaseVersion).CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh modules: %v\n%s", err, out)
	}
	proxy := t.TempDir()
	for _, dir := range moduleDirs(t, repo) {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		mf, err := modfile.Parse("go.mod", data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range mf.Replace {
			if strings.HasPrefix(r.Old.Path, "github.com/tokenlimit/tokenlimit") {
				t.Errorf("%s/go.mod still replaces %s with %s after scripts/release.sh modules", dir, r.Old.Path, r.New.Path)
			}
		}
		publish(t, proxy, mf.Module.Mod.Path, dir, data)
	}
	// Resolve and load the command as `go install ...@version` would:
	// outside any workspace, the repository's modules from the proxy.
	// (Loading every package and its imports is what a build needs of the
	// modules; compiling them adds minutes and proves nothing more here.)
	build := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./tokenlimit")
	build.Dir = filepath.Join(repo, "cmd")
	// A module cache of its own, so that the published test version never
	// lands in the machine's; the machine's cache serves the third-party
	// modules (its download directory is a module proxy's layout).
	gomodcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -modcacherw", "GOMODCACHE="+t.TempDir(),
		"GOPROXY=file://"+proxy+",file://"+filepath.Join(strings.TrimSpace(string(gomodcache)), "cache", "download")+",https://proxy.golang.org",
		"GONOSUMDB=github.com/tokenlimit")
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/tokenlimit from the module proxy, without replace directives: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "github.com/tokenlimit/tokenlimit/cli\n") {
		t.Errorf("cmd/tokenlimit's packages do not include the cli:\n%s", out)
	}
	// The build used the published modules, not the copy's directories.
	list := exec.Command("go", "list", "-m", "-json", "github.com/tokenlimit/tokenlimit/cli")
	list.Dir, list.Env = build.Dir, build.Env
	data, err := list.Output()
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Version string
		Replace any
	}
	if err := json.Unmarshal(data, &m); err != nil || m.Version != releaseVersion || m.Replace != nil {
		t.Errorf("the cli module the build used: %s, want %s from the proxy, not replaced", data, releaseVersion)
	}
}

// copyRepo copies the repository's tracked and untracked-but-not-ignored
// files into a temporary directory.
// scripts/release.sh binaries builds each platform's binary stamped with
// the release's version and a SHA256SUMS that `sha256sum -c` accepts: here
// for this machine's platform only (TOKENLIMIT_PLATFORMS), whose binary
// then runs.
func TestReleaseBinaries(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	build := exec.Command(filepath.Join(root, "scripts", "release.sh"), "binaries", dir)
	build.Env = append(os.Environ(), "TOKENLIMIT_PLATFORMS="+platform, "VERSION="+releaseVersion)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh binaries: %v\n%s", err, out)
	}
	name := "tokenlimit-" + releaseVersion + "-" + runtime.GOOS + "-" + runtime.GOARCH
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(sums)), "\n"); len(lines) != 1 || !strings.HasSuffix(lines[0], "  "+name) {
		t.Fatalf("SHA256SUMS:\n%s\nwant one line for %s", sums, name)
	}
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = dir
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(dir, name), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), releaseVersion) {
		t.Errorf("%s version: %v\n%s\nwant it to print %s", name, err, out, releaseVersion)
	}
}

func copyRepo(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): the release test copies the checkout's files", err)
	}
	dst := t.TempDir()
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the work tree, or a symlink
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), data, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// moduleDirs is every module directory go.work lists, in repo.
func moduleDirs(t *testing.T, repo string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, u := range wf.Use {
		dirs = append(dirs, filepath.Join(repo, u.Path))
	}
	return dirs
}

// publish puts the module at dir into the file proxy at releaseVersion:
// its list, .info, .mod and .zip (the zip as the go command makes it,
// without nested modules).
func publish(t *testing.T, proxy, path, dir string, gomod []byte) {
	t.Helper()
	escaped, err := module.EscapePath(path)
	if err != nil {
		t.Fatal(err)
	}
	at := filepath.Join(proxy, escaped, "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"list":                   releaseVersion + "\n",
		releaseVersion + ".info": `{"Version":"` + releaseVersion + `","Time":"2026-12-01T00:00:00Z"}`,
		releaseVersion + ".mod":  string(gomod),
	} {
		if err := os.WriteFile(filepath.Join(at, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(at, releaseVersion+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := zip.CreateFromDir(f, module.Version{Path: path, Version: releaseVersion}, dir); err != nil {
		t.Fatalf("zip of %s: %v", path, err)
	}
}
