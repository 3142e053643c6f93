#!/usr/bin/env bash
# Issue 27's MPI jobs on the test bed (docs/decisions/host-rnic.md): two hosts
# (network namespaces) on a bridge, each with one address; Open MPI's mpirun on
# the first, 2 ranks of tests/conformance/mpi_check.c on each host, every rank at
# its host's one address with nothing set (the defaults serve it, shared) on
# softrdma's libraries. The other host's daemon is started by mpi_agent.sh (in
# place of ssh).
#   ucx: pml ucx, UCX_TLS=rc_verbs,ud_verbs,self on softrdma0:1 (ud_verbs only
#        carries rc_verbs' wire-up; ranks of one host use rc_verbs too)
#   ofi: pml cm, mtl ofi, libfabric's verbs provider (FI_EP_RDM: ofi_rxm over
#        verbs FI_EP_MSG endpoints, connected through rdma_cm)
# Passes when mpi_check prints its totals with 0 mismatches, its ranks sit two on
# each host, mpirun exits 0, and the job's own log shows the transport (so a
# fallback to TCP cannot pass). Needs root.
#   mpi_fabric.sh SOFTRDMA_TOOL MPI_CHECK TAG ucx|ofi
set -euo pipefail
tool=$1
check=$2
tag=$3
job=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
subnet=10.213.17
[[ $job == ofi ]] && subnet=10.213.18
fabric_prefix="mpi${job:0:1}$tag"
source "$here/fabric_hosts.sh" "$subnet" 2
agent_hosts=""
for host in "${hosts[@]}"; do
  echo "${addr[$host]} slots=2" >> "$out/hostfile"
  agent_hosts+="${addr[$host]}=$host "
done
export MPI_AGENT_HOSTS=$agent_hosts MPI_AGENT_TOOL=$tool
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi_args=(--allow-run-as-root -np 4 --hostfile "$out/hostfile" --map-by slot
          --mca plm_rsh_agent "$here/mpi_agent.sh"
          --mca oob_tcp_if_include eth0 --mca btl self,tcp --mca btl_tcp_if_include eth0)
if [[ $job == ucx ]]; then
  # rc_verbs is a "connect to endpoint" transport: UCX wires it up through
  # messages on a transport that reaches an interface (ud_verbs here); without
  # one, ucp_ep_create fails ("no auxiliary transport ... Unsupported operation").
  # UCX logs the lanes of each endpoint configuration at info level.
  mpi_args+=(--mca pml ucx -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=softrdma0:1
             -x UCX_LOG_LEVEL=info)
else
  # The OFI MTL takes only a provider named exactly "verbs;ofi_rxm" (RDM over
  # verbs MSG endpoints); at verbosity 1 it names it and the domain it opened.
  mpi_args+=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "verbs;ofi_rxm"
             --mca mtl_ofi_verbose 1 --mca mtl_base_verbose 1
             -x FI_PROVIDER=verbs,ofi_rxm -x FI_VERBS_IFACE=eth0)
fi
first=${hosts[0]}
start=$(date +%s%N)
rc=0
ip netns exec "$first" env -u SOFTRDMA_ADDR -u SOFTRDMA_SHARE_ADDRESS timeout 120 \
  "$tool" run -- mpirun "${mpi_args[@]}" "$check" > "$out/job" 2>&1 || rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
cat "$out/job"
echo "== mpi $job: mpirun exit $rc after $ms ms"
status=0
fail() { echo "FAIL: $*"; status=1; }
(( rc == 0 )) || fail "mpirun exit $rc"
grep -Eq '^mpi check: 4 ranks, .* 0 mismatches' "$out/job" || fail "no totals with 0 mismatches"
for host in "${hosts[@]}"; do
  n=$(grep -c "^mpi check: rank [0-9]* at ${addr[$host]}\$" "$out/job" || true)
  (( n == 2 )) || fail "$n ranks at ${addr[$host]}, not 2"
done
# The transport, from each rank's own log: how many processes print a line
# matching $1 (Open MPI's lines start "[host:pid]", UCX's "[time] [host:pid:thread]").
ranks_saying() {
  { grep -E "$1" "$out/job" || true; } | grep -oE '\[[^] :]+:[0-9]+' | sort -u | wc -l || true
}
if [[ $job == ucx ]]; then
  # Every rank has endpoints whose tag lanes are rc_verbs on softrdma0, and no
  # endpoint has a tag lane on anything but rc_verbs (or self, to itself).
  n=$(ranks_saying 'ep_cfg\[[0-9]+\]: tag\((self/memory0 )?rc_verbs/softrdma0:1\)')
  (( n == 4 )) || fail "$n ranks with rc_verbs/softrdma0:1 tag lanes, not 4"
  others=$(grep -E 'ep_cfg\[[0-9]+\]: tag\(' "$out/job" |
             grep -vE 'tag\((self/memory0 )?rc_verbs/softrdma0:1\)' || true)
  [[ -z $others ]] || fail "tag lanes not on rc_verbs: $others"
else
  n=$(ranks_saying 'mtl:ofi:prov: verbs;ofi_rxm$')
  (( n == 4 )) || fail "$n ranks chose the provider verbs;ofi_rxm, not 4"
  n=$(ranks_saying 'mtl:ofi:provider: softrdma0$')
  (( n == 4 )) || fail "$n ranks opened the domain softrdma0, not 4"
fi
exit $status
