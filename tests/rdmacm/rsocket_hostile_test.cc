// rsockets against a peer that speaks rsocket's wire protocol by hand (rdma_cm
// and verbs, docs/decisions/rsockets.md) and then breaks it: the stream must end
// with an error, never read past what was written.
#include <endian.h>
#include <gtest/gtest.h>
#include <rdma/rsocket.h>

#include <cstring>
#include <future>
#include <vector>

#include "rdmacm/rdmacm_fixture.h"
#include "rdmacm/rsocket.h"
#include "rdmacm/rsocket_raw_peer.h"

namespace softrdma::rdmacm::testing {
namespace {

// rsocket's RoCE messages by hand: its receives carry no SGE (the immediate is
// the message).
class HandMadePeer : public RawRsocketPeer {
 public:
  void resolve(sockaddr_in& address) {
    ASSERT_NO_FATAL_FAILURE(open(address, 0));
    for (uint32_t i = 0; i < kDepth; ++i) {
      ibv_recv_wr wr{}, *bad = nullptr;
      ASSERT_EQ(ibv_post_recv(id_->qp, &wr, &bad), 0);
    }
  }

  // Connects with our rs_conn_data and keeps the acceptor's.
  void connect() { connect_offering(2 * sizeof(rsock::WireSge)); }

  // A DATA message (WRITE WITH IMMEDIATE into the peer's receive buffer) that
  // claims `bytes` were written; no byte is.
  void claim_data(uint32_t bytes) {
    ibv_send_wr wr{}, *bad = nullptr;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htobe32(rsock::msg_set(rsock::kOpData, bytes));
    wr.wr.rdma.remote_addr = be64toh(theirs_.data_buf.addr);
    wr.wr.rdma.rkey = be32toh(theirs_.data_buf.key);
    ASSERT_EQ(ibv_post_send(id_->qp, &wr, &bad), 0);
    ibv_wc wc{};
    int n = 0;
    while ((n = ibv_poll_cq(id_->send_cq, 1, &wc)) == 0) {
    }
    ASSERT_EQ(n, 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  }
};

TEST(RsocketHostilePeer, DataLongerThanItsCreditEndsTheStreamWithEproto) {
  sockaddr_in address = ipv4("127.0.0.1", free_port());
  int listener = rsocket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  ASSERT_EQ(rbind(listener, as_sockaddr(address), sizeof address), 0) << std::strerror(errno);
  ASSERT_EQ(rlisten(listener, 1), 0);
  HandMadePeer peer;
  peer.resolve(address);
  auto accepted = std::async(std::launch::async, [&] { return raccept(listener, nullptr, nullptr); });
  peer.connect();
  const int server = accepted.get();
  ASSERT_GE(server, 0) << std::strerror(errno);

  // The peer may write at most half the receive buffer per credit; it claims
  // the immediate's largest length, far past the buffer's end.
  peer.claim_data(0x1fffffff);
  char buf[64];
  EXPECT_EQ(rrecv(server, buf, sizeof buf, 0), -1);
  EXPECT_EQ(errno, EPROTO);
  EXPECT_EQ(rsend(server, buf, sizeof buf, 0), -1);
  EXPECT_EQ(errno, EPROTO);
  EXPECT_EQ(rclose(server), 0);
  EXPECT_EQ(rclose(listener), 0);
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
