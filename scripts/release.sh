#!/usr/bin/env bash
# tokenlimit's releases. docs/dependencies.md ("Releases") describes the
# whole process; this script does its two mechanical steps.
#
#   scripts/release.sh binaries [DIR]   # linux and darwin, amd64 and arm64, with SHA256SUMS
#   scripts/release.sh modules VERSION  # rewrite the nested modules' go.mod for a release
#
# binaries builds cmd/tokenlimit for each platform (CGO off, -trimpath,
# stripped, version stamped: scripts/lib/build.sh) into DIR (default
# dist/), as tokenlimit-<version>-<os>-<arch>, and writes DIR/SHA256SUMS,
# which `sha256sum -c SHA256SUMS` checks. One commit builds the same bytes
# twice (the build date is the commit's time).
#
# modules VERSION drops, in every module go.work lists, the replace
# directives that point at this repository's other modules (../cli, ..) and
# requires those modules at VERSION instead, so that once every module is
# tagged at VERSION (v1.2.3 for the root, cli/v1.2.3, cmd/v1.2.3, ...),
# `go install github.com/tokenlimit/tokenlimit/cmd/tokenlimit@v1.2.3` works:
# go install refuses a module whose go.mod has replace directives.
# deploy/release_test.go runs it on a copy of the repository and installs
# from a local module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/build.sh

readonly module=github.com/tokenlimit/tokenlimit
# TOKENLIMIT_PLATFORMS (space-separated GOOS/GOARCH) builds others; the
# release test builds its own machine's only.
read -r -a platforms <<<"${TOKENLIMIT_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}"

binaries() {
	local dir="${1:-dist}" version
	version="$(tokenlimit_version)"
	mkdir -p "$dir"
	local names=()
	for p in "${platforms[@]}"; do
		local name="tokenlimit-$version-${p%/*}-${p#*/}"
		echo "==> $name"
		build_tokenlimit "${p%/*}" "${p#*/}" "$dir/$name"
		names+=("$name")
	done
	(cd "$dir" && sha256sum "${names[@]}" >SHA256SUMS)
	echo "==> $dir/SHA256SUMS"
	cat "$dir/SHA256SUMS"
}

modules() {
	local version="${1:?usage: scripts/release.sh modules VERSION (such as v1.2.3)}"
	[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "modules: $version is not a semantic version such as v1.2.3" >&2; exit 2; }
	local dir
	for dir in $(GOWORK="$PWD/go.work" go list -m -f '{{.Dir}}'); do
		local gomod="$dir/go.mod" args=()
		# Every replace of one of ours by a local directory goes; its
		# module is required at the release's version.
		while read -r path; do
			args+=("-dropreplace=$path" "-require=$path@$version")
		done < <(sed -nE 's#^[[:space:]]*(replace[[:space:]]+)?('"$module"'(/[^[:space:]]+)?)[[:space:]]+=>[[:space:]]+\.[^[:space:]]*$#\2#p' "$gomod")
		if [ ${#args[@]} -gt 0 ]; then
			go mod edit "${args[@]}" "$gomod"
			echo "==> ${gomod#"$PWD/"}: $((${#args[@]} / 2)) replace directives dropped, required at $version"
		fi
	done
}

case "${1:-}" in
binaries) shift; binaries "$@" ;;
modules) shift; modules "$@" ;;
*) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
