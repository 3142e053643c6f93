# Sourced by the congestion benches (bench/incast.sh, bench/tcp_fairness.sh): their
# common arguments and settings, and `on`, which runs a command on a host of the
# bed (fabric_router.sh) under softrdma with the run's mode. Defines build,
# duration, runs, rate, buffer, mark, modes, tool, fabric_switch; leaves the
# arguments after the first three in `rest`.
#   source fabric_bench.sh DEFAULT_RATE [BUILD] [DURATION] [RUNS] [MORE...]
#   env: RATE BUFFER=128 MARK=32 MODES="dcqcn+delay dcqcn delay off"
bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
default_rate=$1
shift
build=${1:-$bench_dir/../build}
duration=${2:-10}
runs=${3:-1}
shift $(($# < 3 ? $# : 3))
rest=("$@")
rate=${RATE:-$default_rate}
buffer=${BUFFER:-128}
mark=${MARK:-32}
read -r -a modes <<< "${MODES:-dcqcn+delay dcqcn delay off}"
tool=$build/tools/softrdma
fabric_switch=$build/tests/support/softrdma-fabric-switch
[[ -x $tool && -x $fabric_switch ]] || { echo "build $build first (softrdma, softrdma-fabric-switch)" >&2; exit 2; }
# on HOST COMMAND...: under softrdma with congestion control $mode and selective
# repeat on every end (perftest without -R has no CM to agree on it).
on() {
  local host=$1
  shift
  ip netns exec "$host" env -u SOFTRDMA_ADDR SOFTRDMA_CONGESTION="$mode" \
    SOFTRDMA_SELECTIVE_REPEAT=always timeout $((duration + 60)) "$tool" run -- "$@"
}
