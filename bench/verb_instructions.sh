#!/usr/bin/env bash
# Instructions per verb call (issue 26 "No loss of speed", issue 29): callgrind
# counts what one ibv_post_send (8 B RDMA WRITE, 8 B SEND, a list of 32 WRITEs),
# ibv_post_recv and ibv_poll_cq (empty; returning one completion) run in the
# calling thread, over the same-host path and over RoCEv2 on UDP loopback
# (SOFTRDMA_TRANSPORT=udp).
# bench/verb_ops.c says what is counted and what is not.
#
#   bench/verb_instructions.sh [--calls N] [--build DIR] [--softrdma DIR]
#
#   --calls N      calls of each verb per path (default 20000)
#   --build DIR    the build tree holding bench/verb_ops (default: this tree's
#                  build/, where `ninja -C build verb_ops` makes it)
#   --softrdma DIR the build tree whose libibverbs.so.1 and `softrdma` command are
#                  measured (default: --build's); read only, nothing is built there
#
# Prints a Markdown table (docs/performance.md, "Instructions per verb"). Needs
# valgrind. One to three minutes at 20000 calls, with the machine's other work.
set -euo pipefail
calls=20000
build=
softrdma_build=
while (($#)); do
  case $1 in
    --calls) calls=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --softrdma) softrdma_build=$2; shift 2 ;;
    *) sed -n 2,18p "$0"; exit 2 ;;
  esac
done
# Directories given are the caller's; the default is this tree's build/.
[[ -z $build ]] || build=$(realpath "$build")
[[ -z $softrdma_build ]] || softrdma_build=$(realpath "$softrdma_build")
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${build:-build}
softrdma_build=${softrdma_build:-$build}
verb_ops=$(realpath "$build/bench/verb_ops")
softrdma=$(realpath "$softrdma_build/tools/softrdma")
[[ -x $verb_ops && -x $softrdma ]] || { echo "build verb_ops and softrdma first" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is missing (scripts/install-deps.sh)" >&2; exit 1; }
out=$(mktemp -d /tmp/verb-instructions.XXXXXX)
trap 'rm -rf "$out"' EXIT

# The measured tree's source commit, from its CMake cache.
source_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$softrdma_build/CMakeCache.txt")
commit=$(git -C "$source_dir" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$source_dir" diff --quiet HEAD 2>/dev/null || commit+=" (with uncommitted changes)"

# measure PATH TRANSPORT: one run of verb_ops under callgrind; prints
# "OPERATION CALLS INSTRUCTIONS" per operation, from each dump's trigger and summary.
measure() {
  local path=$1 transport=$2 dir=$out/$1
  mkdir -p "$dir"
  # --collect-atstart=no: nothing is counted outside verb_ops' toggles, in any thread.
  SOFTRDMA_TRANSPORT=$transport "$softrdma" run -- \
    valgrind --tool=callgrind --collect-atstart=no --log-file="$dir/valgrind.log" \
    --callgrind-out-file="$dir/callgrind.out" "$verb_ops" "$calls" "$path" "$softrdma" \
    > "$dir/verb_ops.txt" 2>&1 || { cat "$dir/verb_ops.txt" "$dir/valgrind.log" >&2; exit 1; }
  sed -n 's/^verb_ops: //p' "$dir/verb_ops.txt" | grep '^qp' > "$out/$path.check"
  for dump in "$dir"/callgrind.out.*; do
    awk '/^desc: Trigger: Client Request: op / {op = $6; n = $8}
         /^summary:/ {print op, n, $2}' "$dump"
  done
}

echo "softrdma $commit ($softrdma_build), $calls calls per verb and path," \
  "instructions per call in the calling thread:"
echo
echo "| operation | path | instructions per call |"
echo "|---|---|---:|"
for run in "host auto" "udp udp"; do
  read -r path transport <<<"$run"
  measure "$path" "$transport" > "$out/$path.txt"
  # The two client requests around each call, counted alone, are subtracted (for
  # a list, once per 32 WRITEs).
  awk -v path="$path" '
    BEGIN { name["write"] = "`ibv_post_send` RDMA WRITE 8 B"; name["send"] = "`ibv_post_send` SEND 8 B"
            name["write_list"] = "`ibv_post_send` list of 32 RDMA WRITEs 8 B, per WRITE"
            name["recv"] = "`ibv_post_recv`"; name["poll_empty"] = "`ibv_poll_cq`, empty"
            name["poll_one"] = "`ibv_poll_cq`, one completion"
            where["host"] = "same-host"; where["udp"] = "RoCEv2 (UDP loopback)" }
    { per[$1] = $3 / $2; order[NR] = $1 }
    END {
      for (i = 1; i <= NR; ++i) {
        op = order[i]
        if (op == "calibration") continue
        extra = per["calibration"] / (op == "write_list" ? 32 : 1)
        printf "| %s | %s | %.0f |\n", name[op], where[path], per[op] - extra
      }
    }
  ' "$out/$path.txt"
done
echo
echo "Each path checked in \`softrdma status\` (the measured QP's row, its operations counted there):"
for path in host udp; do echo "- $(cat "$out/$path.check")"; done
