#!/usr/bin/env bash
# redis-instructions.sh BENCH [N]: redis-server's instructions per decision
# for one redisstore BenchmarkBatchCall case, counted by valgrind's callgrind
# (deterministic: they do not move with the machine's load). BENCH is the
# case, e.g. 'token_bucket/batch=16', or another redisstore benchmark's case
# by its full name, e.g. 'BenchmarkRecordCall/token_bucket/reserve/lone'
# (then "decision" reads "operation"); N the decisions measured (6400).
#
# redis-server runs under callgrind; a first run of the benchmark loads the
# library and creates the keys, the counters are zeroed, a second run of N
# decisions is measured, and its total (and the FCALL or EVALSHA calls'
# share of it) is divided by N. Needs valgrind.
set -euo pipefail
bench=$1 n=${2:-6400}
case $bench in
Benchmark*) pattern="^${bench}\$" ;;
*) pattern="^BenchmarkBatchCall/${bench}\$" ;;
esac
dir=$(mktemp -d)
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cd "$(dirname "$0")/.."
go test -c -o "$dir/redisstore.test" ./redisstore
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" \
  redis-server --port "$port" --save '' --appendonly no --hz 1 >"$dir/valgrind.log" 2>&1 &
vg=$!
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.5; done
run() {
  TOKENLIMIT_BENCH_REDIS=127.0.0.1:$port "$dir/redisstore.test" -test.run '^$' \
    -test.bench "$pattern" -test.benchtime "${n}x" >/dev/null
}
run
callgrind_control -z "$vg" >/dev/null 2>&1
run
callgrind_control -d "$vg" >/dev/null 2>&1
total=$(callgrind_annotate "$dir"/cg.*.1 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
# The calls' own share (FCALL or EVALSHA, inclusive): without the reading
# of requests and the server's cron, whose share moves a little with how
# long the run takes.
calls=$(callgrind_annotate --inclusive=yes "$dir"/cg.*.1 2>/dev/null |
  awk '/:(fcallCommand|evalShaCommand) / {gsub(",", "", $1); s += $1} END {print s + 0}')
echo "$bench: $((total / n)) redis-server instructions per decision, $((calls / n)) of them in FCALL or EVALSHA ($n decisions)"
