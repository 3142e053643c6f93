// rsockets (rsocket(7)) between two sockets of one process: connections
// through the CM over QP1, bytes as RDMA WRITE WITH IMMEDIATE with credits,
// rpoll, riomap/riowrite, and the errors the man pages give.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "rdmacm/rdmacm_fixture.h"

namespace softrdma::rdmacm::testing {
namespace {

std::vector<uint8_t> pattern(size_t size, unsigned seed) {
  std::vector<uint8_t> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = uint8_t((i * 131 + seed * 7 + (i >> 9)) & 0xff);
  return v;
}

// Sends all of `data` (rsend may take part of it).
bool send_all(int fd, const uint8_t* data, size_t size) {
  for (size_t done = 0; done < size;) {
    ssize_t n = rsend(fd, data + done, size - done, 0);
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

struct Pair {
  uint16_t port = free_port();
  sockaddr_in address = ipv4("127.0.0.1", port);
  int listener = -1, server = -1, client = -1;

  explicit Pair(int iomap_size = 0) {
    listener = rsocket(AF_INET, SOCK_STREAM, 0);
    EXPECT_GE(listener, 0) << std::strerror(errno);
    if (iomap_size != 0) {
      EXPECT_EQ(rsetsockopt(listener, SOL_RDMA, RDMA_IOMAPSIZE, &iomap_size, sizeof iomap_size), 0);
    }
    EXPECT_EQ(rbind(listener, as_sockaddr(address), sizeof address), 0) << std::strerror(errno);
    EXPECT_EQ(rlisten(listener, 4), 0) << std::strerror(errno);
    client = rsocket(AF_INET, SOCK_STREAM, 0);
    EXPECT_GE(client, 0);
    if (iomap_size != 0) {
      EXPECT_EQ(rsetsockopt(client, SOL_RDMA, RDMA_IOMAPSIZE, &iomap_size, sizeof iomap_size), 0);
    }
  }
  void connect() {
    auto accepted = std::async(std::launch::async, [&] { return raccept(listener, nullptr, nullptr); });
    EXPECT_EQ(rconnect(client, as_sockaddr(address), sizeof address), 0) << std::strerror(errno);
    server = accepted.get();
    ASSERT_GE(server, 0) << std::strerror(errno);
  }
  ~Pair() {
    for (int fd : {client, server, listener})
      if (fd >= 0) rclose(fd);
  }
};

TEST(Rsocket, NumbersAreDistinctFromOpenDescriptors) {
  Pair p;
  int real = dup(0);
  ASSERT_GE(real, 0);
  EXPECT_NE(p.client, real);
  EXPECT_NE(p.listener, p.client);
  // The number is a descriptor the process holds open (its rdma_cm channel).
  EXPECT_NE(fcntl(p.client, F_GETFD), -1);
  close(real);
}

TEST(Rsocket, BytesBothWaysLargeAndSmall) {
  Pair p;
  p.connect();
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  ASSERT_EQ(rgetpeername(p.client, reinterpret_cast<sockaddr*>(&peer), &len), 0);
  EXPECT_EQ(ntohs(peer.sin_port), p.port);
  // 3 MiB in one rsend, more than the receive buffer holds: credits must flow.
  const auto big = pattern(3 << 20, 1);
  auto sent = std::async(std::launch::async, [&] { return send_all(p.client, big.data(), big.size()); });
  std::vector<uint8_t> got(big.size());
  ssize_t n = rrecv(p.server, got.data(), got.size(), MSG_WAITALL);
  EXPECT_EQ(n, ssize_t(big.size()));
  EXPECT_TRUE(sent.get());
  EXPECT_TRUE(got == big);
  // Many small writes the other way, read back in arbitrary pieces.
  const auto small = pattern(20000, 2);
  auto sent_small = std::async(std::launch::async, [&] {
    for (size_t at = 0, step = 1; at < small.size(); at += step, step = step % 97 + 1)
      if (!send_all(p.server, small.data() + at, std::min(step, small.size() - at))) return false;
    return true;
  });
  std::vector<uint8_t> back(small.size());
  for (size_t at = 0; at < back.size();) {
    ssize_t got_now = rrecv(p.client, back.data() + at, std::min<size_t>(333, back.size() - at), 0);
    ASSERT_GT(got_now, 0) << std::strerror(errno);
    at += size_t(got_now);
  }
  EXPECT_TRUE(sent_small.get());
  EXPECT_TRUE(back == small);
}

TEST(Rsocket, NonBlockingConnectFinishesInRpoll) {
  Pair p;
  int flags = rfcntl(p.client, F_GETFL);
  ASSERT_EQ(rfcntl(p.client, F_SETFL, flags | O_NONBLOCK), 0);
  // Nobody accepts yet, so the connection cannot be complete.
  ASSERT_EQ(rconnect(p.client, as_sockaddr(p.address), sizeof p.address), -1);
  EXPECT_EQ(errno, EINPROGRESS);
  char byte = 0;
  EXPECT_EQ(rrecv(p.client, &byte, 1, 0), -1);
  EXPECT_EQ(errno, EAGAIN);
  auto accepted = std::async(std::launch::async, [&] { return raccept(p.listener, nullptr, nullptr); });
  pollfd fds{p.client, POLLOUT, 0};
  ASSERT_EQ(rpoll(&fds, 1, 30000), 1);
  EXPECT_TRUE(fds.revents & POLLOUT);
  int err = -1;
  socklen_t len = sizeof err;
  ASSERT_EQ(rgetsockopt(p.client, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, 0);
  p.server = accepted.get();
  ASSERT_GE(p.server, 0);
  EXPECT_EQ(rsend(p.client, "x", 1, 0), 1);
  EXPECT_EQ(rrecv(p.server, &byte, 1, 0), 1);
  EXPECT_EQ(byte, 'x');
}

TEST(Rsocket, EmptyNonBlockingReadIsEagainAndRpollWaits) {
  Pair p;
  p.connect();
  ASSERT_EQ(rfcntl(p.server, F_SETFL, O_NONBLOCK), 0);
  char buf[16];
  EXPECT_EQ(rrecv(p.server, buf, sizeof buf, 0), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(rrecv(p.client, buf, sizeof buf, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
  pollfd fds{p.server, POLLIN, 0};
  EXPECT_EQ(rpoll(&fds, 1, 0), 0);
  // rpoll sleeps in poll(2): 300 ms of waiting cost far less than 300 ms of CPU.
  rusage before{}, after{};
  getrusage(RUSAGE_THREAD, &before);
  EXPECT_EQ(rpoll(&fds, 1, 300), 0);
  getrusage(RUSAGE_THREAD, &after);
  auto cpu_us = [](const rusage& r) {
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000L + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
  };
  EXPECT_LT(cpu_us(after) - cpu_us(before), 150000);
  auto writer = std::async(std::launch::async, [&] { return rsend(p.client, "hello", 5, 0); });
  ASSERT_EQ(rpoll(&fds, 1, 30000), 1);
  EXPECT_TRUE(fds.revents & POLLIN);
  EXPECT_EQ(rrecv(p.server, buf, sizeof buf, 0), 5);
  EXPECT_EQ(std::memcmp(buf, "hello", 5), 0);
  EXPECT_EQ(writer.get(), 5);
}

TEST(Rsocket, PeerCloseReadsAsEndOfStream) {
  Pair p;
  p.connect();
  ASSERT_EQ(rsend(p.client, "0123456789", 10, 0), 10);
  ASSERT_EQ(rclose(p.client), 0);
  p.client = -1;
  char buf[32];
  ASSERT_EQ(rrecv(p.server, buf, sizeof buf, MSG_WAITALL), 10);
  EXPECT_EQ(std::memcmp(buf, "0123456789", 10), 0);
  EXPECT_EQ(rrecv(p.server, buf, sizeof buf, 0), 0);
  pollfd fds{p.server, POLLIN, 0};
  ASSERT_EQ(rpoll(&fds, 1, 30000), 1);
  EXPECT_TRUE(fds.revents & POLLHUP);
  EXPECT_EQ(rsend(p.server, "x", 1, 0), -1);
}

// Keepalives (zero-length WRITE WITH IMMEDIATE, control KEEPALIVE) on a live
// connection are taken and ignored by the peer: they are not data, and the
// stream goes on. Each side's 1 s period passes twice while the server waits.
TEST(Rsocket, KeepalivesOnALiveConnectionAreNotData) {
  Pair p;
  p.connect();
  int one = 1;
  for (int fd : {p.client, p.server}) {
    ASSERT_EQ(rsetsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof one), 0);
    ASSERT_EQ(rsetsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one), 0);
  }
  pollfd fds{p.server, POLLIN, 0};
  EXPECT_EQ(rpoll(&fds, 1, 2500), 0);  // nothing to read: keepalives only
  const auto data = pattern(300000, 9);
  auto writer = std::async(std::launch::async, [&] { return send_all(p.client, data.data(), data.size()); });
  std::vector<uint8_t> got(data.size());
  EXPECT_EQ(rrecv(p.server, got.data(), got.size(), MSG_WAITALL), ssize_t(got.size()));
  EXPECT_TRUE(writer.get());
  EXPECT_EQ(got, data);
  int err = -1;
  socklen_t len = sizeof err;
  EXPECT_EQ(rgetsockopt(p.server, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, 0);
}

TEST(Rsocket, RiowriteLandsInThePeersMapping) {
  Pair p(1);
  p.connect();
  int size = -1;
  socklen_t len = sizeof size;
  ASSERT_EQ(rgetsockopt(p.server, SOL_RDMA, RDMA_IOMAPSIZE, &size, &len), 0);
  EXPECT_EQ(size, 1);
  std::vector<uint8_t> mapped(200000, 0);
  ASSERT_EQ(riomap(p.server, mapped.data(), mapped.size(), PROT_WRITE, 0, 4096), 4096);
  // A second writable mapping does not fit the client's table of one.
  std::vector<uint8_t> other(64);
  EXPECT_EQ(riomap(p.server, other.data(), other.size(), PROT_WRITE, 0, 0), -1);
  // The mapping goes out with the server's next rsend.
  char byte = 0;
  ASSERT_EQ(rsend(p.server, "m", 1, 0), 1);
  ASSERT_EQ(rrecv(p.client, &byte, 1, 0), 1);
  const auto data = pattern(150000, 3);
  EXPECT_EQ(riowrite(p.client, data.data(), data.size(), 4096 + 1000, 0), data.size());
  // Outside the mapping: nothing to write into.
  EXPECT_EQ(riowrite(p.client, data.data(), 10, 0, 0), size_t(-1));
  EXPECT_EQ(errno, EINVAL);
  // RC keeps order: once this byte arrives, the WRITEs before it have landed.
  ASSERT_EQ(rsend(p.client, "d", 1, 0), 1);
  ASSERT_EQ(rrecv(p.server, &byte, 1, 0), 1);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), mapped.begin() + 1000));
  EXPECT_EQ(mapped[999], 0);
  EXPECT_EQ(riounmap(p.server, mapped.data(), mapped.size()), 0);
  EXPECT_EQ(riounmap(p.server, mapped.data(), mapped.size()), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST(Rsocket, OptionsAreKeptAndReported) {
  int fd = rsocket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  int one = 1, size = 1 << 19, value = 0;
  socklen_t len = sizeof value;
  EXPECT_EQ(rsetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), 0);
  EXPECT_EQ(rgetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &value, &len), 0);
  EXPECT_EQ(value, 1);
  EXPECT_EQ(rsetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size), 0);
  EXPECT_EQ(rgetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &value, &len), 0);
  EXPECT_EQ(value, size * 2);  // doubled, as Linux reports it
  int sq = 100;
  EXPECT_EQ(rsetsockopt(fd, SOL_RDMA, RDMA_SQSIZE, &sq, sizeof sq), 0);
  EXPECT_EQ(rgetsockopt(fd, SOL_RDMA, RDMA_SQSIZE, &value, &len), 0);
  EXPECT_EQ(value, 100);
  // Keepalive as rsocket.c: SO_KEEPALIVE on, TCP_KEEPIDLE the period in seconds,
  // TCP_KEEPCNT/TCP_KEEPINTVL accepted and reported as 1 (not applicable).
  EXPECT_EQ(rsetsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one), 0);
  EXPECT_EQ(rgetsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &value, &len), 0);
  EXPECT_EQ(value, 1);
  EXPECT_EQ(rgetsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &value, &len), 0);
  EXPECT_GT(value, 0);  // the host's tcp_keepalive_time
  int idle = 5, zero = 0;
  EXPECT_EQ(rsetsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle), 0);
  EXPECT_EQ(rgetsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &value, &len), 0);
  EXPECT_EQ(value, 5);
  EXPECT_EQ(rsetsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &zero, sizeof zero), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rsetsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &idle, sizeof idle), 0);
  EXPECT_EQ(rgetsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &value, &len), 0);
  EXPECT_EQ(value, 1);
  EXPECT_EQ(rsetsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &zero, sizeof zero), 0);
  EXPECT_EQ(rgetsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &value, &len), 0);
  EXPECT_EQ(value, 0);
  EXPECT_EQ(rfcntl(fd, F_SETFL, O_NONBLOCK), 0);
  EXPECT_TRUE(rfcntl(fd, F_GETFL) & O_NONBLOCK);
  EXPECT_EQ(rclose(fd), 0);
}

TEST(Rsocket, Errors) {
  char buf[4];
  int real = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(real, 0);
  EXPECT_EQ(rrecv(real, buf, sizeof buf, 0), -1);  // not an rsocket
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(rsend(-1, buf, 1, 0), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(rclose(real), -1);
  EXPECT_EQ(errno, EBADF);
  close(real);
  EXPECT_EQ(rsocket(AF_INET, SOCK_DGRAM, 0), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(rsocket(AF_UNIX, SOCK_STREAM, 0), -1);
  EXPECT_EQ(errno, EAFNOSUPPORT);
  int fd = rsocket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(rsend(fd, buf, 1, 0), -1);
  EXPECT_EQ(errno, ENOTCONN);
  sockaddr_in nobody = ipv4("127.0.0.1", free_port());
  EXPECT_EQ(rconnect(fd, as_sockaddr(nobody), sizeof nobody), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
  int err = 0;
  socklen_t len = sizeof err;
  EXPECT_EQ(rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, ECONNREFUSED);
  EXPECT_EQ(rclose(fd), 0);
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
