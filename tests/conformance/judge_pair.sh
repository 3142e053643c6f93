# Sourced by the multi-host scripts that run server/client pairs at once:
#   judge_pair NAME LABEL DONE_REGEX
# waits for ${client[NAME]} and ${server[NAME]} (pids), prints both outputs
# ($out/client.NAME, $out/server.NAME) under LABEL, and returns 1 unless both
# exited 0 and the client's output matches DONE_REGEX.
judge_pair() {
  local name=$1 label=$2 done_line=$3 rc=0 src=0
  wait "${client[$name]}" || rc=$?
  wait "${server[$name]}" || src=$?
  echo "== $label: client exit $rc, server exit $src"
  cat "$out/client.$name"
  echo "-- its server:"
  cat "$out/server.$name"
  if (( rc != 0 || src != 0 )) || ! grep -Eq "$done_line" "$out/client.$name"; then
    echo "FAIL: $name (client exit $rc, server exit $src)"
    return 1
  fi
}
