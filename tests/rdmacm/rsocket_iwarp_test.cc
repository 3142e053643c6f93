// rsockets over iWARP (docs/decisions/rsockets.md "iWARP"): no immediate data,
// so every message is a 4-byte SEND into the peer's receive WRs (rsocket.c's
// RS_OPT_MSG_SEND). Two rsockets of one process, and a peer that speaks that
// protocol by hand to check what is on the wire. Part of
// rdmacm_iwarp_api_test, whose device is the iWARP one (iwarp_device.h).
#include <endian.h>
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "rdmacm/iwarp_device.h"
#include "rdmacm/peer_process.h"
#include "rdmacm/rdmacm_fixture.h"
#include "rdmacm/rsocket.h"
#include "rdmacm/rsocket_raw_peer.h"

namespace softrdma::rdmacm::testing {
namespace {



std::vector<uint8_t> pattern(size_t size, unsigned seed) {
  std::vector<uint8_t> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = uint8_t((i * 131 + seed * 7 + (i >> 9)) & 0xff);
  return v;
}

bool send_all(int fd, const uint8_t* data, size_t size) {
  for (size_t done = 0; done < size;) {
    const ssize_t n = rsend(fd, data + done, size - done, 0);
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

// A listener on 127.0.0.1 at a port rbind picks; `address` gets that port. (A
// port picked, released and bound again could be taken in between by another
// process of a parallel run.)
int listen_on(sockaddr_in& address, int iomap_size) {
  address = ipv4("127.0.0.1", 0);
  const int fd = rsocket(AF_INET, SOCK_STREAM, 0);
  if (iomap_size != 0) rsetsockopt(fd, SOL_RDMA, RDMA_IOMAPSIZE, &iomap_size, sizeof iomap_size);
  socklen_t length = sizeof address;
  if (rbind(fd, as_sockaddr(address), sizeof address) != 0 || rlisten(fd, 4) != 0 ||
      rgetsockname(fd, as_sockaddr(address), &length) != 0)
    return -1;
  return fd;
}

// Credits go round many times (3 MiB through 64 KiB halves), control messages
// and data SENDs share the receive queue, keepalives (zero-length WRITEs) are
// no data, riowrite lands, and the peer's close ends the stream.
TEST(RsocketIwarp, BytesKeepalivesRiowriteAndEndOfStream) {
  ASSERT_IWARP_DEVICE();
  sockaddr_in address{};
  int one = 1;
  const int listener = listen_on(address, 1);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  const int client = rsocket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(rsetsockopt(client, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof one), 0);
  auto accepted =
      std::async(std::launch::async, [&] { return raccept(listener, nullptr, nullptr); });
  ASSERT_EQ(rconnect(client, as_sockaddr(address), sizeof address), 0) << std::strerror(errno);
  const int server = accepted.get();
  ASSERT_GE(server, 0) << std::strerror(errno);

  const auto big = pattern(3 << 20, 1);
  auto sent =
      std::async(std::launch::async, [&] { return send_all(client, big.data(), big.size()); });
  std::vector<uint8_t> got(big.size());
  EXPECT_EQ(rrecv(server, got.data(), got.size(), MSG_WAITALL), ssize_t(big.size()));
  EXPECT_TRUE(sent.get());
  EXPECT_TRUE(got == big);

  ASSERT_EQ(rsetsockopt(server, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof one), 0);
  ASSERT_EQ(rsetsockopt(server, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one), 0);
  pollfd fds{client, POLLIN, 0};
  EXPECT_EQ(rpoll(&fds, 1, 1500), 0);  // a keepalive went, nothing to read

  std::vector<uint8_t> mapped(100000, 0);
  ASSERT_EQ(riomap(server, mapped.data(), mapped.size(), PROT_WRITE, 0, 0), 0);
  char byte = 0;
  ASSERT_EQ(rsend(server, "m", 1, 0), 1);  // carries the mapping (kOpIomapSgl)
  ASSERT_EQ(rrecv(client, &byte, 1, 0), 1);
  const auto data = pattern(90000, 3);
  EXPECT_EQ(riowrite(client, data.data(), data.size(), 500, 0), data.size());
  ASSERT_EQ(rsend(client, "d", 1, 0), 1);  // after the WRITEs, in order
  ASSERT_EQ(rrecv(server, &byte, 1, 0), 1);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), mapped.begin() + 500));
  int err = -1;
  socklen_t len = sizeof err;
  EXPECT_EQ(rgetsockopt(server, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, 0);

  EXPECT_EQ(rclose(client), 0);
  EXPECT_EQ(rrecv(server, &byte, 1, 0), 0);  // the DISCONNECT message: end of stream
  rclose(server);
  rclose(listener);
}

// rsocket's iWARP messages by hand: its receives take the 4-byte messages into
// slots of its memory from 2048 on, one per receive WR.
class WirePeer : public RawRsocketPeer {
 public:
  void connect(sockaddr_in& address) {
    ASSERT_NO_FATAL_FAILURE(open(address, 16));
    for (uint32_t i = 0; i < kDepth; ++i) {
      ibv_sge sge{uint64_t(uintptr_t(memory_.data() + 2048 + 4 * i)), 4, mr_->lkey};
      ibv_recv_wr wr{}, *bad = nullptr;
      wr.wr_id = i;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ASSERT_EQ(ibv_post_recv(id_->qp, &wr, &bad), 0);
    }
    connect_offering(rsock::kSglSize);
  }
  // iWARP's orderly teardown without rsocket's DISCONNECT message: the QP to
  // Error, the stream's FIN.
  void disconnect() { ASSERT_EQ(rdma_disconnect(id_), 0); }

  // The next completion of either queue (rdma_create_qp made one CQ each), 10 s
  // at most: a hang guard, no timing asserted.
  bool next_completion(ibv_cq* cq, ibv_wc& wc) {
    for (int spins = 0; spins < 10'000'000; ++spins) {
      if (ibv_poll_cq(cq, 1, &wc) == 1) return true;
      if (spins > 1000) usleep(1);  // not an event: the pace of a poll with a deadline
    }
    return false;
  }
  bool next_receive(ibv_wc& wc) { return next_completion(id_->recv_cq, wc); }
  bool next_send(ibv_wc& wc) { return next_completion(id_->send_cq, wc); }

  // A message as rsocket.c's rs_post_msg sends it: an inline SEND of `len`
  // bytes of the 32-bit message, in this host's order.
  void send_message(uint32_t msg, uint32_t len = 4) {
    ibv_sge sge{uint64_t(uintptr_t(&msg)), len, 0};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_send(id_->qp, &wr, &bad), 0);
  }

  // DATA: the bytes RDMA-written at the start of the rsocket's receive buffer.
  void write_data(const char* text, uint32_t len) {
    ibv_sge sge{uint64_t(uintptr_t(text)), len, 0};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = be64toh(theirs_.data_buf.addr);
    wr.wr.rdma.rkey = be32toh(theirs_.data_buf.key);
    ASSERT_EQ(ibv_post_send(id_->qp, &wr, &bad), 0);
  }

  const rsock::WireSge& credit_slot(int i) const {
    return reinterpret_cast<const rsock::WireSge*>(memory_.data())[i];
  }
  uint32_t message(uint64_t wr_id) const {
    uint32_t m;
    std::memcpy(&m, memory_.data() + 2048 + 4 * wr_id, 4);
    return m;
  }
};

// What rsocket.c on siw sends and takes: the credit is an SGE RDMA-written into
// slot 1 then a 4-byte SEND (kOpSgl); DATA is a WRITE then a SEND of kOpData
// with the length. A SEND of any other length is no message: EPROTO.
TEST(RsocketIwarp, MessagesAreFourByteSendsAsRsocketCSends) {
  ASSERT_IWARP_DEVICE();
  sockaddr_in address{};
  const int listener = listen_on(address, 0);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  auto accepted =
      std::async(std::launch::async, [&] { return raccept(listener, nullptr, nullptr); });
  WirePeer peer;
  peer.connect(address);
  const int server = accepted.get();
  ASSERT_GE(server, 0) << std::strerror(errno);
  char got[8] = {};
  auto read = std::async(std::launch::async, [&] { return rrecv(server, got, sizeof got, 0); });

  ibv_wc wc{};
  ASSERT_TRUE(peer.next_receive(wc));  // the rsocket's first credit
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 4u);
  EXPECT_EQ(wc.wc_flags & IBV_WC_WITH_IMM, 0);
  const uint32_t credit = peer.message(wc.wr_id);
  EXPECT_EQ(rsock::msg_op(credit), uint32_t(rsock::kOpSgl));
  EXPECT_GT(rsock::msg_data(credit), 0u);
  EXPECT_EQ(peer.credit_slot(1).length, 65536u);  // the second half of 128 KiB

  peer.write_data("hello", 5);
  peer.send_message(rsock::msg_set(rsock::kOpData, 5));
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(peer.next_send(wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  }
  EXPECT_EQ(read.get(), 5);
  EXPECT_EQ(std::string(got, 5), "hello");

  peer.send_message(rsock::msg_set(rsock::kOpData, 5), 2);
  EXPECT_EQ(rrecv(server, got, sizeof got, 0), -1);
  EXPECT_EQ(errno, EPROTO);
  rclose(server);
  rclose(listener);
}

// Issue 27 finding 1: a killed peer (its kernel closes the TCP stream without
// iWARP's orderly teardown: a reset) is a lost stream, as on RoCE
// (PeerDeath.KilledClientEndsAnIdleBlockedReadOnOneHost), not an end of stream:
// rrecv -1/ECONNRESET, rpoll POLLERR without POLLHUP, SO_ERROR ECONNRESET. And
// finding 2: once SO_ERROR was read, rrecv still answers -1 with errno set.
TEST(RsocketIwarp, KilledPeerIsAResetNotAnEndOfStream) {
  ASSERT_IWARP_DEVICE();
  sockaddr_in address{};
  const int listener = listen_on(address, 0);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  PeerProcess client("rsocket", ntohs(address.sin_port));
  const int server = raccept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0) << std::strerror(errno);
  ASSERT_EQ(client.line(), "connected");
  client.kill_now();
  char byte;
  EXPECT_EQ(rrecv(server, &byte, 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  pollfd fds{server, POLLIN | POLLOUT, 0};
  EXPECT_EQ(rpoll(&fds, 1, 0), 1);
  EXPECT_TRUE(fds.revents & POLLERR) << fds.revents;
  EXPECT_FALSE(fds.revents & POLLHUP) << fds.revents;
  int err = 0;
  socklen_t len = sizeof err;
  EXPECT_EQ(rgetsockopt(server, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, ECONNRESET);
  errno = 0;
  EXPECT_EQ(rrecv(server, &byte, 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  errno = 0;
  EXPECT_EQ(rsend(server, "x", 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  rclose(server);
  rclose(listener);
}

// The other side of the distinction: a peer that ends the connection in order
// (rdma_disconnect: iWARP's teardown, a FIN) without rsocket's DISCONNECT
// message is still the end of the stream (0), as after a DREQ on RoCE.
TEST(RsocketIwarp, PeerDisconnectWithoutRsocketCloseIsEndOfStream) {
  ASSERT_IWARP_DEVICE();
  sockaddr_in address{};
  const int listener = listen_on(address, 0);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  auto accepted =
      std::async(std::launch::async, [&] { return raccept(listener, nullptr, nullptr); });
  WirePeer peer;
  peer.connect(address);
  const int server = accepted.get();
  ASSERT_GE(server, 0) << std::strerror(errno);
  peer.disconnect();
  char byte;
  EXPECT_EQ(rrecv(server, &byte, 1, 0), 0);
  pollfd fds{server, POLLIN, 0};
  EXPECT_EQ(rpoll(&fds, 1, 0), 1);
  EXPECT_TRUE(fds.revents & POLLHUP) << fds.revents;
  EXPECT_FALSE(fds.revents & POLLERR) << fds.revents;
  int err = -1;
  socklen_t len = sizeof err;
  EXPECT_EQ(rgetsockopt(server, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, 0);
  rclose(server);
  rclose(listener);
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
