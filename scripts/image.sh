#!/usr/bin/env bash
# Builds tokenlimit's container image with podman and tags it
# localhost/tokenlimit:latest and localhost/tokenlimit:<version>. Needs the
# repository, Go and podman, nothing else: the base is empty (FROM scratch),
# so no registry is asked for anything.
#
#   scripts/image.sh                 # build for this machine's architecture
#   VERSION=v1.2.0 scripts/image.sh  # stamp and tag another version
#   GOARCH=arm64 scripts/image.sh    # build another architecture's image
#
# It prints the image's tags and size. deploy/image/Containerfile says what
# the image holds; docs/deploy.md how to run it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/build.sh

command -v podman >/dev/null || { echo "scripts/image.sh: podman not found: apt-get install podman runc" >&2; exit 1; }
certs=/etc/ssl/certs/ca-certificates.crt
[ -f "$certs" ] || { echo "scripts/image.sh: $certs not found: apt-get install ca-certificates (the image trusts the build machine's CAs)" >&2; exit 1; }

goarch="${GOARCH:-$(go env GOARCH)}"
version="$(tokenlimit_version)"
tag="${version//[^A-Za-z0-9_.-]/-}" # an image tag allows [A-Za-z0-9_.-]
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT

echo "==> building tokenlimit $version for linux/$goarch"
build_tokenlimit linux "$goarch" "$ctx/tokenlimit"
mkdir -p "$ctx/etc/ssl/certs"
cp "$certs" "$ctx/etc/ssl/certs/ca-certificates.crt"
# The one user the image runs as: 65532, no home, no login shell.
echo 'tokenlimit:x:65532:65532:tokenlimit:/nonexistent:/sbin/nologin' >"$ctx/etc/passwd"
echo 'tokenlimit:x:65532:' >"$ctx/etc/group"

echo "==> podman build localhost/tokenlimit:latest, localhost/tokenlimit:$tag"
# --format docker: the OCI format has no HEALTHCHECK.
podman build --quiet --format docker --arch "$goarch" \
	--label org.opencontainers.image.title=tokenlimit \
	--label org.opencontainers.image.version="$version" \
	--label org.opencontainers.image.revision="$(tokenlimit_commit)" \
	--label org.opencontainers.image.created="$(tokenlimit_build_date)" \
	--label org.opencontainers.image.source=https://github.com/tokenlimit/tokenlimit \
	--label org.opencontainers.image.licenses=Apache-2.0 \
	-f deploy/image/Containerfile -t localhost/tokenlimit:latest -t "localhost/tokenlimit:$tag" "$ctx" >/dev/null
size="$(podman image inspect --format '{{.Size}}' localhost/tokenlimit:latest)"
echo "==> localhost/tokenlimit:latest and :$tag, $((size / 1000000)) MB ($size bytes) uncompressed"
