// The CM agent's thread and a reservation closed by the application's thread
// (docs/decisions/rdma-cm.md, "The agent"): rdma_destroy_id closes the socket
// that holds the id's port while the agent may already hold an event for it,
// taken from its epoll before (another process asking the port's holder for its
// GID, as perftest -R's client does while its server closes one listener and
// listens again on the port). Served after the number was reused, that event
// closed whatever the process had opened under it.
//
// A binary of its own: it interposes epoll_wait(2) (the executable's definition
// comes before libc's for librdmacm too) to hold the agent's thread right after
// the epoll_wait that returned the event, which makes the race deterministic.
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "rdmacm/rdmacm_fixture.h"
#include "support/eventually.h"

namespace {

std::atomic<int> trap_fd{-1};       // hold the epoll_wait whose events name it
std::atomic<int> trapped_epoll{-1};  // the epoll that returned it (the agent's)
std::atomic<bool> released{false};
std::atomic<long> calls{0};          // epoll_wait calls on trapped_epoll

bool wait_for(const std::atomic<bool>& flag) {
  return softrdma::testing_support::eventually([&] { return flag.load(); },
                                               std::chrono::seconds(30));
}

}  // namespace

extern "C" int epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout) {
  using Fn = int (*)(int, epoll_event*, int, int);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "epoll_wait"));
  if (epfd == trapped_epoll.load()) calls.fetch_add(1);
  const int n = real(epfd, events, maxevents, timeout);
  const int trap = trap_fd.load();
  for (int i = 0; trap >= 0 && i < n; ++i) {
    if (events[i].data.fd != trap) continue;
    trap_fd = -1;
    trapped_epoll = epfd;
    wait_for(released);
    break;
  }
  return n;
}

namespace softrdma::rdmacm::testing {
namespace {

// The abstract name of a reservation (src/rdmacm/address.cc).
sockaddr_un reservation_name(uint16_t port, socklen_t& length) {
  sockaddr_un name{};
  name.sun_family = AF_UNIX;
  const int n = std::snprintf(name.sun_path + 1, sizeof name.sun_path - 1,
                              "softrdma-rdmacm/%x/%u/127.0.0.1", unsigned(RDMA_PS_TCP),
                              unsigned(port));
  length = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + n);
  return name;
}

// The descriptor of this process bound to `name`, or -1.
int bound_to(const sockaddr_un& name, socklen_t length) {
  for (int fd = 0; fd < 1024; ++fd) {
    sockaddr_un mine{};
    socklen_t mine_length = sizeof mine;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mine_length) == 0 &&
        mine_length == length && std::memcmp(&mine, &name, length) == 0)
      return fd;
  }
  return -1;
}

TEST(AgentEvents, AReservationsEventServedAfterItsIdIsDestroyedClosesNothingOpenedSince) {
  const uint16_t port = free_port();  // also starts the agent and opens the device
  ASSERT_NE(port, 0);
  sockaddr_in loopback = ipv4("127.0.0.1", port);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_bind_addr(id, as_sockaddr(loopback)), 0);
  socklen_t length = 0;
  const sockaddr_un name = reservation_name(port, length);
  const int reservation = bound_to(name, length);
  ASSERT_GE(reservation, 0);

  // Another process's question makes the reservation readable; the agent's
  // thread takes the event and is held there.
  trap_fd = reservation;
  const int asker = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  ASSERT_EQ(connect(asker, reinterpret_cast<const sockaddr*>(&name), length), 0);
  testing_support::eventually([] { return trapped_epoll.load() >= 0; }, std::chrono::seconds(30));
  ASSERT_GE(trapped_epoll.load(), 0) << "the agent never saw the reservation readable";

  // Meanwhile the application destroys the id and opens a file, under the
  // reservation's number if that is free again (the kernel gives the lowest free
  // number; here the lowest from the reservation's on, so that a lower one freed
  // by the bind's own probes does not hide the reuse).
  ASSERT_EQ(rdma_destroy_id(id), 0);
  const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(null, 0);
  const int file = fcntl(null, F_DUPFD_CLOEXEC, reservation);
  close(null);
  ASSERT_GE(file, 0);
  std::printf("[ note ] the file has %s number\n",
              file == reservation ? "the reservation's" : "another");

  // The agent serves its batch and waits again.
  const long before = calls.load();
  released = true;
  testing_support::eventually([&] { return calls.load() != before; }, std::chrono::seconds(30));
  ASSERT_GT(calls.load(), before);
  EXPECT_GE(fcntl(file, F_GETFD), 0) << "the agent closed the application's file";
  // Whatever kept the reservation's number taken meanwhile is gone with the batch.
  if (file != reservation) {
    EXPECT_LT(fcntl(reservation, F_GETFD), 0);
  }
  close(file);
  close(asker);
  // The port is free at once, as before (perftest -R listens on it again).
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
  EXPECT_EQ(rdma_bind_addr(id, as_sockaddr(loopback)), 0);
  rdma_destroy_id(id);
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
