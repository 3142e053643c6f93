#!/usr/bin/env bash
# Two containers talk RDMA over softrdma (issue 17; docs/containers.md): each in
# its own network namespace on a podman network, without capabilities
# (--cap-drop=ALL), without gaining any (no-new-privileges), without devices,
# as uid 65534; each with SOFTRDMA_ADDR set to its own address. An rping pair
# (rdma_cm: CM MADs on QP1, then RC SENDs, READs and WRITEs) and an ib_write_bw
# pair cross between them as RoCEv2 on UDP port 4791 (a capture of the bridge
# checks it); then the Kubernetes example's two pods run their own commands
# the same way (packaging/k8s/softrdma-pair.yaml).
#   containers.sh BUILD_DIR VERSION PORT     (PORT and PORT+1 are used)
# The image comes from packaging/build-image.sh (the cached Debian root). Needs
# root (rootful podman, a capture on the bridge), podman, runc, mmdebstrap,
# tcpdump and python3-yaml; without them it fails, saying which.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
packaging=$(cd "$here/../../packaging" && pwd)
# shellcheck source=../../packaging/podman-settings.sh
source "$packaging/podman-settings.sh"
build=$1 version=$2 port=$3
fail() { echo "containers: FAIL: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "needs root (rootful podman: a network of its own, the cached Debian root)"
for tool in podman runc mmdebstrap tcpdump; do
  command -v "$tool" > /dev/null || fail "no $tool: run scripts/install-deps.sh"
done
python3 -c 'import yaml' 2> /dev/null || fail "no python3-yaml: run scripts/install-deps.sh"

work=$(mktemp -d /tmp/softrdma-containers.XXXXXX)
image=localhost/softrdma-test:$$
net=softrdma-test-$$
names=()
capture=
cleanup() {
  [[ -z $capture ]] || kill "$capture" 2>/dev/null || true
  ((${#names[@]} == 0)) || "${podman[@]}" rm -f -t 0 "${names[@]}" > /dev/null 2>&1 || true
  "${podman[@]}" network rm -f "$net" > /dev/null 2>&1 || true
  "${podman[@]}" rmi -f "$image" > /dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
started=$SECONDS

# What a run killed at its TIMEOUT (no trap runs on SIGKILL) left: containers,
# network and image named after a pid that is gone.
sweep_stale() {
  local stale pid
  for stale in $("${podman[@]}" network ls --format '{{.Name}}' | grep -E '^softrdma-test-[0-9]+$'); do
    pid=${stale#softrdma-test-}
    [[ -d /proc/$pid ]] && continue
    "${podman[@]}" ps -a --format '{{.Names}}' | grep "^$stale-" | xargs -r "${podman[@]}" rm -f -t 0 > /dev/null || true
    "${podman[@]}" network rm -f "$stale" > /dev/null || true
    "${podman[@]}" rmi -f "localhost/softrdma-test:$pid" > /dev/null 2>&1 || true
  done
}

make_image() {
  local t=$SECONDS deb
  (cd "$build" && cpack -B "$work/out" > "$work/cpack.log" 2>&1) ||
    { cat "$work/cpack.log"; fail "cpack failed"; }
  deb=$work/out/softrdma_${version}_$(dpkg --print-architecture).deb
  "$packaging/build-image.sh" "$deb" "$image" > /dev/null || fail "packaging/build-image.sh"
  echo "containers: image $image built in $((SECONDS - t)) s"
}

# A podman network (a bridge; each container a veth of it in a namespace of its
# own). podman picks a free /24; the containers take fixed host numbers in it.
make_network() {
  "${podman[@]}" network create "$net" > /dev/null || fail "podman network create"
  local subnet
  subnet=$("${podman[@]}" network inspect "$net" --format '{{range .Subnets}}{{.Subnet}}{{end}}')
  [[ $subnet =~ ^([0-9]+\.[0-9]+\.[0-9]+)\.0/24$ ]] || fail "expected a /24 network, got '$subnet'"
  prefix=${BASH_REMATCH[1]}
  bridge=$("${podman[@]}" network inspect "$net" --format '{{.NetworkInterface}}')
  echo "containers: network $net, $subnet on bridge $bridge"
}

# What crosses the bridge, captured from the host: the proof that the pairs
# talked RoCEv2 between namespaces (softrdma's same-host path cannot reach
# across containers: no shared /dev/shm, no shared pid namespace).
start_capture() {
  tcpdump -i "$bridge" -n -w "$work/bridge.pcap" udp port 4791 > "$work/tcpdump.log" 2>&1 &
  capture=$!
  for _ in $(seq 100); do grep -q "listening on" "$work/tcpdump.log" && return; sleep 0.1; done
  fail "tcpdump did not start: $(cat "$work/tcpdump.log")"
}

# Both directions carried RoCEv2 datagrams between the two address pairs.
check_capture() {
  kill -INT "$capture"; wait "$capture" || true
  local packets
  packets=$(tcpdump -n -r "$work/bridge.pcap" 2> /dev/null)
  local pair from to
  for pair in "$prefix.11 $prefix.10" "$prefix.10 $prefix.11" "$prefix.13 $prefix.12" "$prefix.12 $prefix.13"; do
    read -r from to <<<"$pair"
    # The source port varies by flow (RoCEv2 uses it for entropy); the destination is 4791.
    grep -Eq "IP ${from//./\\.}\.[0-9]+ > ${to//./\\.}\.4791: UDP" <<<"$packets" || fail "no RoCEv2 datagram $from -> $to on $bridge"
  done
  echo "containers: $(wc -l <<<"$packets") RoCEv2 datagrams crossed $bridge"
}

# Sets run_cmd to start (-d) or run (--rm) a container at ADDR: unprivileged,
# no devices, SOFTRDMA_ADDR its own address; the image's entrypoint is
# `softrdma run --`. (An array, not a function, so that `timeout` can run it.)
#   container NAME ADDR -d|--rm [--add-host NAME:ADDR] PROGRAM ARGS...
container() {
  local name=$1 addr=$2 mode=$3 hosts=()
  shift 3
  if [[ $1 == --add-host ]]; then hosts=("$1" "$2"); shift 2; fi
  names+=("$name")
  run_cmd=("${podman[@]}" run "$mode" --name "$name" --network "$net" --ip "$addr" "${hosts[@]}"
    --cap-drop=ALL --security-opt=no-new-privileges --user 65534:65534 "${podman_limits[@]}"
    -e SOFTRDMA_ADDR="$addr" "$image" "$@")
}

# Waits (at most 30 s) until `ss ARGS` in container NAME prints PATTERN.
wait_listening() {
  local name=$1 pattern=$2
  shift 2
  for _ in $(seq 300); do
    grep -q "$pattern" <<<"$("${podman[@]}" exec "$name" ss "$@" 2>/dev/null)" && return 0
    sleep 0.1
  done
  return 1
}

# A detached container's log and exit status, once it ends (within SECONDS, default 30).
container_done() {
  local name=$1 status
  status=$(timeout "${2:-30}" "${podman[@]}" wait "$name") || status="(still running)"
  "${podman[@]}" logs "$name" > "$work/$name.log" 2>&1 || true
  [[ $status == 0 ]] || { cat "$work/$name.log"; fail "$name exited with $status"; }
}

# The containers hold no capability, and no RDMA device is passed in.
check_unprivileged() {
  local caps
  caps=$("${podman[@]}" run --rm --network "$net" --cap-drop=ALL --security-opt=no-new-privileges \
    --user 65534:65534 "${podman_limits[@]}" --entrypoint /bin/sh "$image" \
    -c 'grep -E "^(CapEff|CapBnd|NoNewPrivs)" /proc/self/status; ls /dev/infiniband 2>&1 || true')
  local expected
  for expected in '^CapEff:\s+0+$' '^CapBnd:\s+0+$' '^NoNewPrivs:\s+1$' 'infiniband.*No such file'; do
    grep -Eq "$expected" <<<"$caps" || fail "not unprivileged ($expected): $caps"
  done
}

rping_pair() {
  local t=$SECONDS server=$prefix.10 client=$prefix.11
  container "$net-rping-s" "$server" -d rping -s -a "$server" -p "$port" -C 3 -v
  "${run_cmd[@]}" > /dev/null || fail "rping server container"
  wait_listening "$net-rping-s" "softrdma-rdmacm/[^ ]*/$port/" -lxH || fail "rping server not listening"
  container "$net-rping-c" "$client" --rm rping -c -a "$server" -p "$port" -C 3 -v
  timeout 60 "${run_cmd[@]}" > "$work/rping.client" 2>&1 || { cat "$work/rping.client"; fail "rping client"; }
  [[ $(grep -c "ping data: rdma-ping-" "$work/rping.client") -eq 3 ]] ||
    { cat "$work/rping.client"; fail "rping: not 3 pings"; }
  container_done "$net-rping-s"
  echo "containers: rping $client -> $server: 3 pings in $((SECONDS - t)) s"
}

bw_pair() {
  local t=$SECONDS server=$prefix.12 client=$prefix.13 bw_port=$((port + 1))
  local args=(ib_write_bw -p "$bw_port" -s 65536 -n 200)
  container "$net-bw-s" "$server" -d "${args[@]}"
  "${run_cmd[@]}" > /dev/null || fail "ib_write_bw server container"
  wait_listening "$net-bw-s" . -ltnH "sport = :$bw_port" || fail "ib_write_bw server not listening"
  container "$net-bw-c" "$client" --rm "${args[@]}" "$server"
  timeout 60 "${run_cmd[@]}" > "$work/bw.client" 2>&1 ||
    { cat "$work/bw.client"; fail "ib_write_bw client"; }
  local row
  row=$(grep -E '^\s*65536\s+200\s+' "$work/bw.client") || { cat "$work/bw.client"; fail "ib_write_bw: no result row"; }
  container_done "$net-bw-s"
  echo "containers: ib_write_bw $client -> $server in $((SECONDS - t)) s: $(tr -s ' ' <<<"$row")"
}

# The Kubernetes example's two pods (packaging/k8s/softrdma-pair.yaml), their
# own commands run under podman as the cluster would run them: the same user,
# no capabilities, SOFTRDMA_ADDR the pod's address, the server's name resolving
# to its address (the headless Service's part); the client first, as pods start
# in any order. The manifest must ask for no privilege (k8s_pods.py check).
manifest_pair() {
  local t=$SECONDS manifest=$packaging/k8s/softrdma-pair.yaml server=$prefix.20 client=$prefix.21
  python3 "$here/k8s_pods.py" "$manifest" check || fail "$manifest asks for privileges"
  local server_args client_args
  mapfile -d '' server_args < <(python3 "$here/k8s_pods.py" "$manifest" args softrdma-server)
  mapfile -d '' client_args < <(python3 "$here/k8s_pods.py" "$manifest" args softrdma-client)
  ((${#server_args[@]} && ${#client_args[@]})) || fail "no args for the pods in $manifest"
  container "$net-k8s-c" "$client" -d --add-host "softrdma-server:$server" "${client_args[@]}"
  "${run_cmd[@]}" > /dev/null || fail "client pod's container"
  container "$net-k8s-s" "$server" -d "${server_args[@]}"
  "${run_cmd[@]}" > /dev/null || fail "server pod's container"
  container_done "$net-k8s-c" 120
  container_done "$net-k8s-s" 30
  grep -Eq '^\s*65536\s+2000\s+' "$work/$net-k8s-c.log" || { cat "$work/$net-k8s-c.log"; fail "pods: no ib_write_bw row"; }
  echo "containers: the Kubernetes example's pods, under podman: rping and ib_write_bw in $((SECONDS - t)) s"
}

sweep_stale
make_image
make_network
check_unprivileged
start_capture
rping_pair
bw_pair
check_capture
manifest_pair
echo "containers: two unprivileged containers ran rping and ib_write_bw over softrdma; $((SECONDS - started)) s in all"
