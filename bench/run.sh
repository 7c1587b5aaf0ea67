#!/usr/bin/env bash
# Reruns every benchmark of docs/benchmarks.md and leaves the raw outputs and
# summaries in one folder (default: a new folder under /tmp):
#
#   bench/run.sh [OUT_DIR]
#
# It takes about 20 minutes on 2 CPUs. The load tools start their own
# redis-server on a free 127.0.0.1 port (never a system Redis) and stop it;
# httpload also starts `tokenlimit serve` (built from this checkout) as a
# child process on free loopback ports.
# Figures swing with whatever else the machine runs: compare only within one
# run, and look at the load averages it records.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d /tmp/tokenlimit-bench.XXXXXX)}
mkdir -p "$out"
benchstat="go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da"
rounds=${ROUNDS:-3}

{
	echo "nproc: $(nproc)"
	grep -m1 'model name' /proc/cpuinfo || true
	go version
	redis-server --version
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "load average before: $(cat /proc/loadavg)"
} >"$out/machine.txt"
cat "$out/machine.txt"

# In-process: the whole suite once per round, so that a burst of other load
# spreads over every benchmark instead of hitting one.
echo "==> memstore benchmarks (main module), $rounds rounds"
: >"$out/memstore.txt"
for _ in $(seq "$rounds"); do
	go test -run '^$' -bench . -benchmem -cpu 1,2 ./memstore/ >>"$out/memstore.txt"
done
echo "==> in-process side by side with golang.org/x/time/rate (bench module), $rounds rounds"
: >"$out/inprocess.txt"
for _ in $(seq "$rounds"); do
	(cd bench && go test -run '^$' -bench . -benchmem -cpu 1,2 .) >>"$out/inprocess.txt"
done
echo "load average after in-process: $(cat /proc/loadavg)" >>"$out/machine.txt"

echo "==> Redis: throughput, script cost, script anatomy, memory per key"
(cd bench && go run ./cmd/loadcompare -runs "$rounds") >"$out/loadcompare.md" 2>"$out/loadcompare.log"
echo "load average after loadcompare: $(cat /proc/loadavg)" >>"$out/machine.txt"

echo "==> the quota plane at 100,000 keys on Redis: yaml vs plane, commands per decision, memory per key"
(cd bench && go run ./cmd/planeload) >"$out/planeload.md" 2>"$out/planeload.log"
echo "==> one hot key through the library: 4 limiters x 16 goroutines on one redis-server, with and without leases"
(cd bench && go run ./cmd/leaselib -runs "$rounds") >"$out/leaselib.md" 2>"$out/leaselib.log"

# The service: the Envoy RLS Go benchmarks (client and server in one test
# process), then tokenlimit serve under httpload (a child process).
echo "==> one hot key through the service: 4 replicas x 16 callers over HTTP, embedded vs redis vs leases"
(cd bench && go run ./cmd/leaseload -lease '{size: 1000, ttl: 2s}' -runs "$rounds") >"$out/leaseload.md" 2>"$out/leaseload.log"
echo "==> across regions: an admitted call of a global limit over an 80 ms link, with and without a lease"
go test -run '^$' -bench 'BenchmarkRegionAdmittedCall/^lease$' -benchtime 5000x -count "$rounds" ./service/ >"$out/regions.txt"
go test -run '^$' -bench 'BenchmarkRegionAdmittedCall/^no-lease$' -benchtime 300x -count 1 ./service/ >>"$out/regions.txt"
echo "==> server/rlsv3 Go benchmarks, $rounds rounds"
: >"$out/rlsv3.txt"
for _ in $(seq "$rounds"); do
	go test -run '^$' -bench . -benchtime 2s ./server/rlsv3/ >>"$out/rlsv3.txt"
done
echo "==> tokenlimit serve: HTTP /v1/check and gRPC ShouldRateLimit, memory and Redis"
(cd bench && go run ./cmd/httpload -runs "$rounds" -shares 0.25,0.5 -duration 4s -profile-dir "$out/profiles") \
	>"$out/httpload.md" 2>"$out/httpload.log"
# Side by side with envoyproxy/ratelimit, when its service_cmd is installed
# (see docs/benchmarks.md, issue 9).
envoy_bin="$(go env GOPATH)/bin/service_cmd"
if [ -x "$envoy_bin" ]; then
	echo "==> tokenlimit serve vs envoyproxy/ratelimit (gRPC, Redis)"
	(cd bench && go run ./cmd/envoycompare -envoy "$envoy_bin" -runs "$rounds" -store-timeout 1s) \
		>"$out/envoycompare.md" 2>"$out/envoycompare.log"
fi
echo "load average at the end: $(cat /proc/loadavg)" >>"$out/machine.txt"

# The LLM proxy and the dashboard, in process.
echo "==> proxy: tokenizer and proxy overhead; web: /v1/check with the overview open or closed"
go test -run '^$' -bench . -benchtime 3000x ./proxy/ >"$out/proxy.txt"
go test -run '^$' -bench . -count "$rounds" ./web/ >"$out/web.txt"

$benchstat "$out/memstore.txt" >"$out/memstore.benchstat.txt"
$benchstat "$out/inprocess.txt" >"$out/inprocess.benchstat.txt"
$benchstat "$out/rlsv3.txt" >"$out/rlsv3.benchstat.txt"
echo "==> results in $out"
