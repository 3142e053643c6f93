// rdma_bind_addr(3) to a loopback address on a device whose GIDs are a host's
// real address (SOFTRDMA_ADDR): as the kernel's rdma_cm (cma.c, cma_any_addr),
// the id has no device until rdma_resolve_addr gives it one; it still listens.
// libfabric's verbs provider depends on it to name an endpoint by the
// interface's address rather than 127.0.0.1 (tests/conformance/mpi_fabric.sh,
// the Open MPI job over its OFI MTL). A device that serves loopback (nothing
// configured: each process's 127.x.y.z) binds it as before.
#include <gtest/gtest.h>

#include "rdmacm/peer_process.h"
#include "rdmacm/two_hosts.h"

namespace softrdma::rdmacm::testing {
namespace {

TEST_F(TwoHosts, ALoopbackBindOnAHostAddressHasNoDeviceUntilResolved) {
  PeerProcess peer(in(ns_a_, server_address_), "bind-loopback", server_address_, port_);
  EXPECT_EQ(peer.line(), "bound: no device");
  EXPECT_EQ(peer.line(), "listening");
  EXPECT_EQ(peer.line(), "resolved: device");
  EXPECT_TRUE(peer.exited_cleanly());
}

TEST(LoopbackBind, ADeviceServingLoopbackBindsIt) {
  PeerProcess peer("bind-loopback", 9);
  EXPECT_EQ(peer.line(), "bound: device");
  EXPECT_EQ(peer.line(), "listening");
  EXPECT_EQ(peer.line(), "resolved: device");
  EXPECT_TRUE(peer.exited_cleanly());
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
