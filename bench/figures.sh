# shellcheck shell=bash
# Shell helpers for the benches' figures (sourced by bench/lossy_fabric.sh and
# bench/link_1500.sh): a median, and a median of per-round ratios, so that a
# ratio compares runs of the same minutes (this machine's speed drifts between
# minutes: docs/decisions/wire-speed.md, "The noise").

# median VALUES...: the middle value (the lower middle of an even count), or
# "fail" with none.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR ? v[int((NR + 1) / 2)] : "fail") }'; }

# per_round_ratio "FIGURES" "BASES": the median of the rounds' ratios, figure i
# over base i (a failed run, "fail", has none), as "0.91".
per_round_ratio() {
  local -a figures bases ratios=()
  read -r -a figures <<< "$1"
  read -r -a bases <<< "$2"
  for ((i = 0; i < ${#figures[@]}; ++i)); do
    [[ ${figures[i]} == fail || ${bases[i]:-fail} == fail ]] && continue
    ratios+=("$(awk "BEGIN { printf \"%.3f\", ${figures[i]} / ${bases[i]} }")")
  done
  median "${ratios[@]}" | awk '{ printf "%.2f", $1 }'
}
