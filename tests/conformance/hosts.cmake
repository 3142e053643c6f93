# Conformance tests across several "hosts" (network namespaces on a veth pair or a
# bridge, each with its address): rdma_cm across hosts (issue 8), processes sharing
# one host's address (issue 27: docs/decisions/host-rnic.md), the test bed and its
# MPI jobs. Included by clients.cmake; each script needs root (ip netns).
# Across two hosts: network namespaces joined by a veth pair, SOFTRDMA_ADDR on each.
add_test(NAME conformance.rping.two_hosts
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/rping_two_hosts.sh $<TARGET_FILE:softrdma>
          ${SOFTRDMA_CONFORMANCE_PORT_BASE})
set_tests_properties(conformance.rping.two_hosts PROPERTIES TIMEOUT 180 LABELS conformance)
# Issue 27: three servers sharing one host's address, reached from another host.
add_test(NAME conformance.ibv_rc_pingpong.shared_address
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/shared_address.sh $<TARGET_FILE:softrdma>
          ${SOFTRDMA_CONFORMANCE_PORT_BASE})
set_tests_properties(conformance.ibv_rc_pingpong.shared_address PROPERTIES TIMEOUT 180
                     LABELS conformance)
# ... rdma_cm servers of five processes on that address (RC, UD by SIDR, perftest
# -R), their CM MADs handed to the listener's or the connection's process.
add_test(NAME conformance.rdma_cm.shared_address
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/shared_address_cm.sh $<TARGET_FILE:softrdma>
          ${SOFTRDMA_CONFORMANCE_PORT_BASE} $<TARGET_FILE:connect_gate>)
set_tests_properties(conformance.rdma_cm.shared_address PROPERTIES TIMEOUT 180
                     LABELS conformance)
# The test bed: four hosts on a bridge; on one, three ib_write_bw servers (by GID
# and with -R), an rping and a ucmatose server at once, each with a client on
# another host; RoCEv2 on a shared address, and iWARP.
foreach(wire roce iwarp)
  add_test(NAME conformance.fabric.shared_address_${wire}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/shared_address_fabric.sh $<TARGET_FILE:softrdma>
            ${SOFTRDMA_CONFORMANCE_PORT_BASE} $<TARGET_FILE:connect_gate> ${wire})
  set_tests_properties(conformance.fabric.shared_address_${wire} PROPERTIES TIMEOUT 240
                       LABELS conformance)
endforeach()
# Issue 28: two hosts losing 5 % of their data packets; the traffic node checks
# every byte of every RC operation across them, with selective repeat (agreed
# through ECE without the rdma_cm) and with go-back-N; and two hosts whose
# queues mark 5 % CE instead, answered by CNPs (congestion control).
foreach(mode sr gbn ecn)
  add_test(NAME conformance.fabric.lossy_${mode}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/lossy_fabric.sh $<TARGET_FILE:softrdma>
            $<TARGET_FILE:softrdma-traffic-node> ${SOFTRDMA_CONFORMANCE_PORT_BASE} ${mode})
  set_tests_properties(conformance.fabric.lossy_${mode} PROPERTIES TIMEOUT 240
                       LABELS conformance)
endforeach()
# Issue 28: incast of three senders into one receiver through a shallow-buffered,
# ECN-marking bottleneck (softrdma-fabric-switch on NFQUEUE): every byte checked,
# CNPs received by every sender.
add_test(NAME conformance.fabric.incast
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/incast_fabric.sh $<TARGET_FILE:softrdma>
          $<TARGET_FILE:softrdma-traffic-node> $<TARGET_FILE:softrdma-fabric-switch>
          ${SOFTRDMA_CONFORMANCE_PORT_BASE})
set_tests_properties(conformance.fabric.incast PROPERTIES TIMEOUT 240 LABELS conformance)
# Two MPI jobs on the test bed (Debian's Open MPI 4.1.4, scripts/install-deps.sh):
# 2 ranks of mpi_check.c on each of two hosts, every rank at its host's one
# address; over UCX rc_verbs, and over libfabric's verbs provider (OFI MTL).
find_package(MPI COMPONENTS C)
if(NOT MPI_C_FOUND)
  message(FATAL_ERROR "Open MPI is not installed (scripts/install-deps.sh installs it)")
endif()
add_executable(mpi_check mpi_check.c)
target_link_libraries(mpi_check PRIVATE MPI::MPI_C softrdma_ibverbs)
target_include_directories(mpi_check PRIVATE ${IBVERBS_INCLUDE_DIR})
foreach(job ucx ofi)
  add_test(NAME conformance.fabric.mpi_${job}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi_fabric.sh $<TARGET_FILE:softrdma>
            $<TARGET_FILE:mpi_check> ${SOFTRDMA_CONFORMANCE_PORT_BASE} ${job})
  set_tests_properties(conformance.fabric.mpi_${job} PROPERTIES TIMEOUT 180 LABELS conformance)
endforeach()
# UCX takes every free 2 MiB page (softrdma_client_test_on_path says why).
set_tests_properties(conformance.fabric.mpi_ucx PROPERTIES RESOURCE_LOCK huge_pages)
# ... and one of four such servers killed mid-traffic: the others finish.
add_test(NAME conformance.ibv_rc_pingpong.shared_address_kill
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/shared_address_kill.sh $<TARGET_FILE:softrdma>
          ${SOFTRDMA_CONFORMANCE_PORT_BASE})
set_tests_properties(conformance.ibv_rc_pingpong.shared_address_kill PROPERTIES TIMEOUT 240
                     LABELS conformance)
