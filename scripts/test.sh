#!/usr/bin/env bash
# The project's one test command: installs what the tests need, then vets,
# runs staticcheck (pinned) and tests every package of every module with the
# race detector.
# Extra arguments go to go test, e.g. scripts/test.sh -run TestStore -v
set -euo pipefail
cd "$(dirname "$0")/.."

# Run a command as root: directly when we are root, through sudo otherwise.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# helm, pinned (deploy/tools_test.go's helmVersion): the chart's tests run
# helm lint and helm template. Built from source once per machine into a
# cache directory the tests look in; it takes minutes, so it builds in the
# background while everything else installs, is vetted and tested, and
# deploy's tests wait for it ($TOKENLIMIT_HELM_BUILD names the build). The
# binary is built beside its directory and moved in whole.
HELM_VERSION="$(sed -n 's/^const helmVersion = "\(v[0-9.]*\)"$/\1/p' deploy/tools_test.go)"
helm_dir="${XDG_CACHE_HOME:-$HOME/.cache}/tokenlimit/tools/helm-$HELM_VERSION"
helm_build=""
helm_log=""
if [ ! -x "$helm_dir/helm" ]; then
	echo "==> helm $HELM_VERSION missing: go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION into $helm_dir in the background (minutes, once per machine)"
	helm_log="$(mktemp)"
	(
		GOBIN="$helm_dir.partial" GOWORK=off go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" &&
			mkdir -p "$helm_dir" && mv "$helm_dir.partial/helm" "$helm_dir/helm"
	) >"$helm_log" 2>&1 &
	helm_build=$!
	export TOKENLIMIT_HELM_BUILD=$helm_build
fi
# helm_built waits for the background build, showing its output if it failed.
helm_built() {
	local build=$helm_build
	helm_build=""
	if [ -n "$build" ] && ! wait "$build"; then
		cat "$helm_log" >&2
		echo "==> building helm $HELM_VERSION failed" >&2
		return 1
	fi
}
trap 'helm_built || true; echo "==> scripts/test.sh: FAILED (see above)" >&2' ERR

# Debian packages, installed in one apt-get when any is missing:
#   redis-server  tests start their own servers on free ports (internal/redistest),
#                 never a system Redis on 6379;
#   chromium      the dashboard's browser tests (web/browser_test.go), headless;
#   nginx, caddy  the gateway examples' tests (examples/gateways);
#   podman, runc  the container image's tests (deploy/image_test.go);
#   node, npm     the official LLM SDKs driven through the proxy (proxy/*_sdk_test.go).
missing=()
need() { # need PACKAGE COMMAND...: PACKAGE is missing unless every COMMAND is found
	local pkg=$1 cmd
	shift
	for cmd in "$@"; do
		if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ] && [ ! -x "/usr/bin/$cmd" ]; then
			missing+=("$pkg")
			return
		fi
	done
}
need redis-server redis-server
need chromium chromium
need nginx-light nginx
need caddy caddy
need podman podman
need runc runc
need nodejs node
need npm npm
if [ ${#missing[@]} -gt 0 ]; then
	echo "==> missing: installing ${missing[*]} (apt-get install)"
	as_root apt-get update
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi
echo "==> $(redis-server --version)"
echo "==> $(/usr/bin/chromium --version 2>/dev/null)"
echo "==> $( (command -v nginx >/dev/null && nginx -v || /usr/sbin/nginx -v) 2>&1), caddy $(caddy version)"
echo "==> $(podman --version), $(runc --version | head -1)"

# The official Anthropic and OpenAI SDKs (each pinned in its
# package-lock.json): the proxy's tests drive them through the proxy
# (proxy/anthropic_sdk_test.go, proxy/retry_test.go).
for sdk in proxy/testdata/anthropic-sdk:@anthropic-ai/sdk proxy/testdata/openai-sdk:openai; do
	dir="${sdk%%:*}" pkg="${sdk#*:}"
	if [ ! -f "$dir/node_modules/$pkg/package.json" ]; then
		echo "==> installing $pkg for the proxy's tests (npm ci in $dir)"
		(cd "$dir" && npm ci --no-audit --no-fund)
	fi
	echo "==> $pkg $(node -p "require('./$dir/node_modules/$pkg/package.json').version")"
done
echo "==> node $(node --version)"

# envoyproxy/ratelimit, pinned: envoycompat's differential test runs it beside
# tokenlimit serve --envoy-env and requires the same answers.
ENVOY_RATELIMIT_MODULE=github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36
gobin="$(go env GOBIN)"; gobin="${gobin:-$(go env GOPATH)/bin}"
if [ ! -x "$gobin/service_cmd" ]; then
	echo "==> envoyproxy/ratelimit missing: go install $ENVOY_RATELIMIT_MODULE"
	go install "$ENVOY_RATELIMIT_MODULE"
fi
echo "==> envoyproxy/ratelimit: $gobin/service_cmd"
# grpcurl, pinned: the gRPC port's reflection test runs docs/rls.md's recipe.
GRPCURL_MODULE=github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3
if [ ! -x "$gobin/grpcurl" ]; then
	echo "==> grpcurl missing: go install $GRPCURL_MODULE"
	go install "$GRPCURL_MODULE"
fi
echo "==> $("$gobin/grpcurl" --version 2>&1)"

# Every module go.work uses: the library at the root and the nested modules
# of the service, its tests and the benchmarks (./... alone stops at a nested
# module's go.mod). One go command over all of them, from the root, in the
# workspace even when GOWORK is set otherwise.
export GOWORK="$PWD/go.work"
mapfile -t dirs < <(go list -m -f '{{.Dir}}')
pkgs=()
for dir in "${dirs[@]}"; do
	pkgs+=(".${dir#"$PWD"}/...")
done
echo "==> ${#dirs[@]} modules: ${pkgs[*]}"

echo "==> go vet"
go vet "${pkgs[@]}"

# staticcheck, pinned: the tree is kept clean of its findings.
echo "==> staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 "${pkgs[@]}"

# A package's tests may take more than go test's default 10 minutes on a
# fresh, loaded machine (deploy builds and runs the image with podman).
echo "==> go test -race -count=1 -timeout 30m $*"
go test -race -count=1 -timeout 30m "${pkgs[@]}" "$@"
helm_built
echo "==> $("$helm_dir/helm" version --short)"

echo "==> scripts/test.sh: all checks passed"
