# Sourced by scripts/image.sh and scripts/release.sh: how a release binary
# of tokenlimit is built, in one place.
#
# build_tokenlimit GOOS GOARCH OUT builds cmd/tokenlimit for GOOS/GOARCH
# into the file OUT: CGO off (a static binary), -trimpath (no build paths in
# it), symbols stripped, and the version, commit and build date stamped
# (tokenlimit version prints them). Run from the repository's root.
#
# The version is $VERSION when set, else `git describe` of the checkout
# (a v* tag, or devel-<commit>), else "devel". The build date is
# $SOURCE_DATE_EPOCH when set, else the commit's time, so that one commit
# builds the same bytes twice.

tokenlimit_version() {
	if [ -n "${VERSION:-}" ]; then
		echo "$VERSION"
	elif git rev-parse --git-dir >/dev/null 2>&1; then
		git describe --tags --match 'v*' --dirty 2>/dev/null ||
			echo "devel-$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
	else
		echo devel
	fi
}

tokenlimit_commit() {
	git rev-parse HEAD 2>/dev/null || echo unknown
}

tokenlimit_build_date() {
	local epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
	date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ
}

build_tokenlimit() {
	local goos="$1" goarch="$2" out="$3"
	local pkg=github.com/tokenlimit/tokenlimit/cli
	local ldflags="-s -w -X $pkg.version=$(tokenlimit_version) -X $pkg.commit=$(tokenlimit_commit) -X $pkg.buildDate=$(tokenlimit_build_date)"
	GOWORK="$PWD/go.work" CGO_ENABLED=0 GOOS="$goos" GOARCH="$goarch" \
		go build -trimpath -buildvcs=false -ldflags="$ldflags" -o "$out" ./cmd/tokenlimit
}
