#!/usr/bin/env bash
# A fault drill for cluster mode, that anyone can run:
#
#   scripts/cluster-drill.sh [--duration SECONDS] [--rate MSGS_PER_S] [--bin DIR] [--keep]
#                            [--replicas N | --redis-cluster [--kill-control]]
#
# It starts a Redis primary, one replica (--replicas N: N) and three
# sentinels (Debian's
# redis-server, in its normal and --sentinel modes) and two Herald nodes on
# the sentinel URL, all on free 127.0.0.1 ports, then runs `herald drill`:
# a producer on each node sends numbered persistent messages with receipts
# to a queue, another to a topic with a durable subscriber, and consumers
# on both nodes count every number. During the run it SIGKILLs one Herald
# node and restarts it (a quarter in), then SIGKILLs the Redis primary
# (past half way) and, once the sentinels have promoted the replica,
# restarts the old primary as the new one's replica (a receipt waits for
# one replica: cluster.min_replicas is 1 with Sentinel). At the end the
# drill prints sent, receipted, delivered, lost, duplicates and how long
# each failover took, and the script exits non-zero unless nothing
# receipted was lost and every duplicate was marked redelivered and came
# after a fault.
#
# With --redis-cluster it starts a Redis Cluster instead: three primaries
# with a replica each (redis-server --cluster-enabled yes, joined by
# redis-cli --cluster create, cluster-require-full-coverage no), the nodes
# on redis+cluster://, and the second fault SIGKILLs the primary of the
# shard that holds the drill's queue (named so that it is not the shard of
# the cluster's own keys); once Redis Cluster has promoted its replica,
# the old primary is restarted and rejoins as the new one's replica.
# With --kill-control it SIGKILLs instead the primary that holds the
# cluster's own keys (the `{herald}` tag), named first in the nodes' URL:
# the worst shard to lose, since every node's sends wait for it.
#
# Whatever the faults, a node's log says that its links to Redis broke or
# came back at most once in 10 s a side: the script fails if either node
# wrote more than 40 such lines, and prints each node's count and CPU
# time.
#
# Binaries come from --bin (default target/release, built if missing).
# Everything it starts is stopped by process id when it ends; --keep
# leaves the logs in the work directory it names.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=60
rate=500
bin=target/release
keep=false
redis_cluster=false
kill_control=false
replicas=1
while [ $# -gt 0 ]; do
  case "$1" in
    --redis-cluster) redis_cluster=true; shift ;;
    --kill-control) kill_control=true; shift ;;
    --replicas) replicas="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --keep) keep=true; shift ;;
    *) echo "usage: $0 [--duration SECONDS] [--rate MSGS_PER_S] [--bin DIR] [--keep] [--replicas N | --redis-cluster [--kill-control]]" >&2; exit 2 ;;
  esac
done
if $kill_control && ! $redis_cluster; then
  echo "--kill-control goes with --redis-cluster" >&2
  exit 2
fi
if [ "$duration" -lt 16 ]; then
  echo "--duration must be at least 16 seconds: room for both faults and their recovery" >&2
  exit 2
fi
for command in redis-server redis-cli python3; do
  command -v "$command" >/dev/null || { echo "$command is missing (Debian: apt-get install redis-server python3)" >&2; exit 1; }
done
if [ ! -x "$bin/herald" ] || [ ! -x "$bin/herald-server" ]; then
  [ "$bin" = target/release ] || { echo "no herald binaries in $bin" >&2; exit 1; }
  cargo build --release --locked --bins
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/herald-drill.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if $keep; then echo "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
now_ms() { date +%s%3N; }
# Waits until process $2 listens on 127.0.0.1:$1.
wait_port() {
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  echo "process $2 does not listen on port $1; logs kept in $work" >&2
  keep=true
  exit 1
}
started=$(date +%s)
# The Herald nodes' CPU time so far, in seconds.
cpu_seconds() {
  local total=0 pid
  for pid in "${node_pid[@]}"; do
    [ -r "/proc/$pid/stat" ] || continue
    total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
  done
  awk -v t="$total" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
}
say() { printf '[drill +%3ss] %s\n' "$(($(date +%s) - started))" "$*"; }

# Redis: pid by port; with --redis-cluster, the cluster bus port too.
declare -A redis_pid bus_port
start_redis() { # port [primary port]
  # A replica that (re)joins syncs at once, not after the default 5 s
  # wait for other replicas to join too: receipts wait for one.
  local port=$1 args=(--bind 127.0.0.1 --port "$1" --save '' --appendonly no --dir "$work"
    --repl-diskless-sync-delay 0)
  [ $# -gt 1 ] && args+=(--replicaof 127.0.0.1 "$2")
  if $redis_cluster; then
    [ -n "${bus_port[$port]:-}" ] || bus_port[$port]=$(free_port)
    args+=(--cluster-enabled yes --cluster-port "${bus_port[$port]}"
      --cluster-config-file "nodes-$port.conf" --cluster-node-timeout 1000
      --cluster-require-full-coverage no)
  fi
  redis-server "${args[@]}" >>"$work/redis-$port.log" 2>&1 &
  redis_pid[$port]=$!
  pids+=($!)
  wait_port "$port" $!
}
# The port of the live primary that serves slot $2, as the node on port
# $1 sees it.
primary_of_slot() {
  redis-cli -p "$1" CLUSTER NODES | awk -v slot="$2" '
    $3 ~ /master/ && $3 !~ /fail/ {
      for (i = 9; i <= NF; i++) {
        n = split($i, r, "-"); lo = r[1]; hi = (n > 1) ? r[2] : r[1]
        if (slot + 0 >= lo + 0 && slot + 0 <= hi + 0) { split($2, a, "[:@]"); print a[2]; exit }
      }
    }'
}
if $redis_cluster; then
  ports=()
  for _ in 1 2 3 4 5 6; do
    port=$(free_port)
    start_redis "$port"
    ports+=("$port")
  done
  # shellcheck disable=SC2046
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${ports[@]}") --cluster-replicas 1 \
    --cluster-yes >"$work/cluster-create.log" 2>&1
  for port in "${ports[@]}"; do
    until redis-cli -p "$port" CLUSTER INFO | grep -q cluster_state:ok; do sleep 0.1; done
  done
  control=$(primary_of_slot "${ports[0]}" "$(redis-cli -p "${ports[0]}" CLUSTER KEYSLOT 'herald:{herald}:')")
  other=${ports[0]}
  [ "$other" = "$control" ] && other=${ports[1]}
  url="redis+cluster://127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}"
  $kill_control && url="redis+cluster://127.0.0.1:$control,127.0.0.1:$other"
  say "Redis Cluster of three primaries with a replica each: ${ports[*]}"
else
  primary=$(free_port)
  start_redis "$primary"
  replica_ports=()
  for _ in $(seq "$replicas"); do
    replica=$(free_port)
    start_redis "$replica" "$primary"
    replica_ports+=("$replica")
  done
  until [ "$(redis-cli -p "$primary" WAIT "$replicas" 100)" = "$replicas" ]; do sleep 0.1; done
  sentinels=()
  for _ in 1 2 3; do
    port=$(free_port)
    cat >"$work/sentinel-$port.conf" <<EOF
bind 127.0.0.1
port $port
sentinel monitor herald 127.0.0.1 $primary 2
sentinel down-after-milliseconds herald 1000
sentinel failover-timeout herald 5000
sentinel parallel-syncs herald 1
EOF
    redis-server "$work/sentinel-$port.conf" --sentinel >"$work/sentinel-$port.log" 2>&1 &
    pids+=($!)
    wait_port "$port" $!
    sentinels+=("127.0.0.1:$port")
  done
  url="redis+sentinel://$(IFS=,; echo "${sentinels[*]}")/herald"
  say "Redis primary :$primary, replica(s) :${replica_ports[*]}, sentinels ${sentinels[*]}"
fi

# Herald nodes: pid and port by name.
declare -A node_pid node_port
start_node() { # name
  local name=$1
  if [ ! -f "$work/$name.toml" ]; then
    node_port[$name]=$(free_port)
    cat >"$work/$name.toml" <<EOF
listen = "127.0.0.1:${node_port[$name]}"
data_dir = "$work/$name"
[stomp]
enabled = false
websocket_enabled = false
[mqtt]
enabled = false
websocket_enabled = false
[amqp]
enabled = false
[admin]
enabled = false
[cluster]
redis = "$url"
node_id = "drill-$name"
claim_idle_ms = 3000
EOF
  fi
  RUST_LOG=${RUST_LOG:-info} "$bin/herald-server" --config "$work/$name.toml" >>"$work/$name.log" 2>&1 &
  node_pid[$name]=$!
  pids+=($!)
  wait_port "${node_port[$name]}" $!
}
start_node a
start_node b
say "Herald nodes a :${node_port[a]} and b :${node_port[b]} on $url"

# The queue and topic's name. On a Redis Cluster, one whose queue is not
# on the shard of the cluster's own keys (the `{herald}` tag): the queue's
# primary then dies while the node's other shards, and its registry, go
# on, so sends to the queue fail one by one rather than all waiting.
name="drill$$"
if $redis_cluster; then
  for i in $(seq 100); do
    slot=$(redis-cli -p "${ports[0]}" CLUSTER KEYSLOT "herald:q:{$name.queue}")
    [ "$(primary_of_slot "${ports[0]}" "$slot")" != "$control" ] && break
    name="drill$$-$i"
  done
fi

faults="$work/faults"
: >"$faults"
"$bin/herald" drill --nodes "127.0.0.1:${node_port[a]},127.0.0.1:${node_port[b]}" \
  --duration "$duration" --rate "$rate" --faults "$faults" --name "$name" &
drill=$!
pids+=($drill)

# Sleeps until $1 seconds into the drill; stops if the drill ended early.
at() {
  while [ "$(date +%s)" -lt $((started + $1)) ]; do
    kill -0 "$drill" 2>/dev/null || { wait "$drill"; exit $?; }
    sleep 0.2
  done
}
started=$(date +%s)

at $((duration / 4))
kill -9 "${node_pid[a]}"
wait "${node_pid[a]}" 2>/dev/null || true
echo "$(now_ms) SIGKILL Herald node a" >>"$faults"
say "killed Herald node a (pid ${node_pid[a]})"
sleep 2
start_node a
say "restarted Herald node a (pid ${node_pid[a]})"

at $((duration * 11 / 20))
if $redis_cluster; then
  key="herald:q:{$name.queue}"
  $kill_control && key='herald:{herald}:'
  slot=$(redis-cli -p "$other" CLUSTER KEYSLOT "$key")
  old=$(primary_of_slot "$other" "$slot")
  cpu_at_kill=$(cpu_seconds)
  kill -9 "${redis_pid[$old]}"
  wait "${redis_pid[$old]}" 2>/dev/null || true
  echo "$(now_ms) SIGKILL Redis primary :$old" >>"$faults"
  say "killed :$old, the primary of $key's slot $slot (pid ${redis_pid[$old]})"
  asked=$other
  new=""
  for _ in $(seq 600); do
    new=$(primary_of_slot "$asked" "$slot")
    [ -n "$new" ] && [ "$new" != "$old" ] && break
    sleep 0.1
  done
  if [ -z "$new" ] || [ "$new" = "$old" ]; then
    echo "Redis Cluster promoted no replica in 60 s; logs in $work" >&2
    keep=true
    exit 1
  fi
  say "Redis Cluster promoted :$new"
  # Its nodes file makes it rejoin, as the replica of the promoted one.
  start_redis "$old"
  say "restarted :$old, which rejoins as a replica"
else
  old=$(redis-cli -p "${sentinels[0]##*:}" SENTINEL get-master-addr-by-name herald | tail -n 1)
  cpu_at_kill=$(cpu_seconds)
  kill -9 "${redis_pid[$old]}"
  wait "${redis_pid[$old]}" 2>/dev/null || true
  echo "$(now_ms) SIGKILL Redis primary :$old" >>"$faults"
  say "killed the Redis primary :$old (pid ${redis_pid[$old]})"
  for _ in $(seq 600); do
    new=$(redis-cli -p "${sentinels[0]##*:}" SENTINEL get-master-addr-by-name herald | tail -n 1)
    [ "$new" != "$old" ] && break
    sleep 0.1
  done
  [ "$new" != "$old" ] || { echo "the sentinels promoted no replica in 60 s; logs in $work" >&2; keep=true; exit 1; }
  say "the sentinels promoted :$new"
  # Only now: a primary restarted empty before the failover would be
  # followed by its replica and lose everything.
  start_redis "$old" "$new"
  say "restarted :$old as the replica of :$new"
fi

status=0
wait "$drill" || status=$?
$redis_cluster || say "the nodes' view of the primary: $(grep -h 'primary' "$work"/a.log "$work"/b.log | tail -n 1 | cut -c1-160)"
say "the nodes' CPU time from the Redis kill to the end: $(awk -v a="$cpu_at_kill" -v b="$(cpu_seconds)" 'BEGIN { printf "%.2f", b - a }') s"
for n in a b; do
  links=$(grep -c -E 'lost Redis|connected to Redis' "$work/$n.log" || true)
  say "node $n: $(wc -l <"$work/$n.log") log lines, $links about its links to Redis"
  if [ "$links" -gt 40 ]; then
    echo "node $n said $links times that a link to Redis broke or came back: not rate-limited; logs in $work" >&2
    keep=true
    status=1
  fi
done
exit "$status"
