#!/usr/bin/env bash
# Open MPI's launcher agent on the test bed (plm_rsh_agent, in place of ssh):
# mpirun calls it as `mpi_agent.sh HOST COMMAND...` to start its daemon (orted)
# on HOST, an address of its hostfile. The host is the network namespace holding
# that address (MPI_AGENT_HOSTS: "address=namespace ..."); the daemon runs there
# at that address through `softrdma run` (MPI_AGENT_TOOL), so every rank it
# forks inherits softrdma's libraries; nothing else is set: every rank serves its
# host's one address, shared (the defaults, DESIGN.md §6).
# As ssh does, the words of COMMAND are joined and given to a shell: mpirun
# quotes its arguments for one.
set -euo pipefail
host=$1
shift
for pair in $MPI_AGENT_HOSTS; do
  if [[ ${pair%%=*} == "$host" ]]; then
    exec ip netns exec "${pair#*=}" env -u SOFTRDMA_ADDR -u SOFTRDMA_SHARE_ADDRESS \
      "$MPI_AGENT_TOOL" run -- sh -c "$*"
  fi
done
echo "mpi_agent.sh: no host at $host (MPI_AGENT_HOSTS: $MPI_AGENT_HOSTS)" >&2
exit 255
