#!/usr/bin/env bash
# perf.sh profiles one party of the peers section with Linux perf: shaper
# (`shaper run`) or the hand-written JetStream loop (bench/peers/loop -source jetstream),
# from JetStream to an HTTP sink at a paced rate, each of nats-server, the
# sink and the party a process of its own, as `go run ./bench -only peers`
# runs them. It prints the party's CPU per message and context switches per
# message (perf stat), and where its samples went: the kernel's share,
# context switches (finish_task_switch), the Go scheduler looking for work
# (findRunnable) and sysmon. It leaves perf.PARTY.data in the current
# directory for `perf report -i`.
#
#   bench/perf.sh shaper 100 [SECONDS]
#   bench/perf.sh loop 1000
#
# Needs perf (Debian: linux-perf) and permission to profile other
# processes (root, or kernel.perf_event_paranoid <= 1).
set -euo pipefail

party=${1:?usage: perf.sh shaper|loop LIMIT [SECONDS]}
limit=${2:?usage: perf.sh shaper|loop LIMIT [SECONDS]}
secs=${3:-8}
case $party in shaper | loop) ;; *) echo "perf.sh: party must be shaper or loop, not $party" >&2; exit 2 ;; esac
command -v perf >/dev/null || { echo "perf.sh: perf not found (apt-get install -y linux-perf)" >&2; exit 2; }

repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

(cd "$repo" && go build -o "$tmp/broker" ./bench/peers/broker &&
	go build -o "$tmp/sink" ./bench/peers/sink &&
	go build -o "$tmp/loop" ./bench/peers/loop &&
	go build -o "$tmp/shaper" ./cmd/shaper)

# Enough backlog for the warm-up, the profile and the count.
"$tmp/broker" -kind nats -stream IN -subject in.cb -backlog $((limit * (2 * secs + 10) + 1000)) >"$tmp/nats.out" 2>&1 &
pids+=($!)
"$tmp/sink" -listen 127.0.0.1:0 >"$tmp/sink.out" 2>&1 &
pids+=($!)
for _ in $(seq 600); do
	[[ -s $tmp/sink.out ]] && grep -q nats "$tmp/nats.out" 2>/dev/null && break
	sleep 0.1
done
nats=$(grep -m1 nats "$tmp/nats.out")
sink=$(head -1 "$tmp/sink.out")/callback

if [[ $party == loop ]]; then
	"$tmp/loop" -source jetstream -nats "$nats" -stream IN -consumer perf -sink "$sink" -rate "$limit" -workers 8 >"$tmp/party.out" 2>&1 &
else
	cat >"$tmp/shaper.yaml" <<YAML
pipelines:
  - name: perf
    source:
      nats: {url: "$nats", subject: in.cb, stream: IN, durable: perf}
    bucket: {capacity: 1000, max_queue_time: 1m}
    rate: {mode: leaky, limit: $limit}
    sink:
      http: {url: "$sink", max_in_flight: 8}
YAML
	"$tmp/shaper" run --config "$tmp/shaper.yaml" >"$tmp/party.out" 2>&1 &
fi
pid=$!
pids+=($pid)
sleep 3 # past the start

stat=$(perf stat -x, -e task-clock,context-switches -p "$pid" -- sleep "$secs" 2>&1 >/dev/null)
perf record -q -F 2999 -g -o "$out/perf.$party.data" -p "$pid" -- sleep "$secs" >/dev/null 2>&1

ms=$(awk -F, '/task-clock/ {print $1}' <<<"$stat")
cs=$(awk -F, '/context-switches/ {print $1}' <<<"$stat")
msgs=$((limit * secs))
awk -v ms="$ms" -v cs="$cs" -v n="$msgs" -v p="$party" -v l="$limit" 'BEGIN {
	printf "%s at %s/s: %.0f µs CPU and %.1f context switches per message (%.2f%% of a core)\n", p, l, ms * 1000 / n, cs / n, ms / 10 / (n / l) }'
report() { perf report -i "$out/perf.$party.data" --stdio "$@" 2>/dev/null | grep '%' || true; }
kernel=$(report --no-children --sort dso -g none | awk '/kernel/ {print $1}')
echo "samples: kernel ${kernel:-0%}"
report --children --sort sym -g none |
	awk '/finish_task_switch|runtime\.findRunnable$|runtime\.sysmon$|runtime\.retake$|runtime\.handoffp$/ {printf "  %-8s %s\n", $1, $NF}'
echo "perf report -i $out/perf.$party.data for the rest"
