// Event channels and ids (rdma_create_event_channel(3), rdma_get_cm_event(3),
// rdma_ack_cm_event(3), rdma_create_id(3), rdma_destroy_id(3), rdma_migrate_id(3)).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include <rdma/rsocket.h>

#include "rdmacm/rdmacm_fixture.h"

namespace softrdma::rdmacm::testing {
namespace {

TEST(Channel, EmptyNonBlockingChannelIsEagain) {
  rdma_event_channel* channel = rdma_create_event_channel();
  ASSERT_NE(channel, nullptr);
  ASSERT_EQ(fcntl(channel->fd, F_SETFL, O_NONBLOCK), 0);
  rdma_cm_event* event = nullptr;
  EXPECT_EQ(rdma_get_cm_event(channel, &event), -1);
  EXPECT_EQ(errno, EAGAIN);
  rdma_destroy_event_channel(channel);
}

TEST(Channel, ResolvedAddressIsAnEventOnAPollableFd) {
  rdma_event_channel* channel = rdma_create_event_channel();
  ASSERT_NE(channel, nullptr);
  rdma_cm_id* id = nullptr;
  int context_marker = 7;
  ASSERT_EQ(rdma_create_id(channel, &id, &context_marker, RDMA_PS_TCP), 0);
  EXPECT_EQ(id->channel, channel);
  EXPECT_EQ(id->context, &context_marker);
  EXPECT_EQ(id->qp_type, IBV_QPT_RC);
  sockaddr_in dst = ipv4("127.0.0.1", 9);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, as_sockaddr(dst), 2000), 0);
  rdma_cm_event* event = next_event(channel);
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(event->event, RDMA_CM_EVENT_ADDR_RESOLVED) << rdma_event_str(event->event);
  EXPECT_EQ(event->status, 0);
  EXPECT_EQ(event->id, id);
  EXPECT_EQ(rdma_ack_cm_event(event), 0);
  EXPECT_NE(id->verbs, nullptr);
  EXPECT_NE(rdma_get_src_port(id), 0);
  EXPECT_EQ(rdma_get_dst_port(id), htons(9));
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(channel);
}

// rdma_destroy_id(3) drops the events never taken; the channel stays usable.
TEST(Channel, DestroyDropsEventsNotTaken) {
  rdma_event_channel* channel = rdma_create_event_channel();
  ASSERT_NE(channel, nullptr);
  rdma_cm_id* dropped = nullptr;
  rdma_cm_id* kept = nullptr;
  ASSERT_EQ(rdma_create_id(channel, &dropped, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_create_id(channel, &kept, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in dst = ipv4("127.0.0.1", 9);
  ASSERT_EQ(rdma_resolve_addr(dropped, nullptr, as_sockaddr(dst), 2000), 0);
  ASSERT_EQ(rdma_destroy_id(dropped), 0);
  ASSERT_EQ(rdma_resolve_addr(kept, nullptr, as_sockaddr(dst), 2000), 0);
  rdma_cm_event* event = next_event(channel);
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(event->id, kept);
  rdma_ack_cm_event(event);
  ASSERT_EQ(fcntl(channel->fd, F_SETFL, O_NONBLOCK), 0);
  EXPECT_EQ(rdma_get_cm_event(channel, &event), -1);
  EXPECT_EQ(errno, EAGAIN);
  rdma_destroy_id(kept);
  rdma_destroy_event_channel(channel);
}

TEST(Channel, MigratedIdReportsOnItsNewChannel) {
  rdma_event_channel* first = rdma_create_event_channel();
  rdma_event_channel* second = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(first, &id, nullptr, RDMA_PS_UDP), 0);
  EXPECT_EQ(id->qp_type, IBV_QPT_UD);
  ASSERT_EQ(rdma_migrate_id(id, second), 0);
  EXPECT_EQ(id->channel, second);
  sockaddr_in dst = ipv4("127.0.0.1", 9);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, as_sockaddr(dst), 2000), 0);
  rdma_cm_event* event = next_event(second);
  ASSERT_NE(event, nullptr);
  rdma_ack_cm_event(event);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(first);
  rdma_destroy_event_channel(second);
}

// The system call a thread of this process is in ("7" for poll), or "running".
std::string syscall_of(pid_t tid) {
  std::ifstream file("/proc/self/task/" + std::to_string(tid) + "/syscall");
  std::string number;
  file >> number;
  return number;
}

size_t open_fds() {
  size_t count = 0;
  DIR* dir = opendir("/proc/self/fd");
  while (readdir(dir) != nullptr) ++count;
  closedir(dir);
  return count;
}

enum class ReaderCame { kBeforeTheDestruction, kAfterIt };

// rdma_destroy_event_channel(3) while another thread reads the channel, or is
// about to (rping's event thread loops back into rdma_get_cm_event as its main
// thread destroys the channel and exits): the reader waits, as one blocked on the
// kernel's device does until the process exits; it neither fails (rping exits
// 255 on that) nor reads a closed fd or freed memory (ASan would say).
class DestroyedChannel : public ::testing::TestWithParam<ReaderCame> {};

TEST_P(DestroyedChannel, ItsReaderWaitsInsteadOfFailing) {
  rdma_event_channel* channel = rdma_create_event_channel();
  ASSERT_NE(channel, nullptr);
  std::atomic<pid_t> reader_tid{0};
  std::atomic<bool> destroyed{false};
  std::atomic<bool> returned{false};
  const bool after = GetParam() == ReaderCame::kAfterIt;
  if (after) rdma_destroy_event_channel(channel);
  std::thread reader([&, channel] {
    reader_tid = pid_t(syscall(SYS_gettid));
    rdma_cm_event* event = nullptr;
    rdma_get_cm_event(channel, &event);
    returned = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto reader_in = [&](long call) {
    while (reader_tid == 0 || syscall_of(reader_tid) != std::to_string(call)) {
      if (returned || std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  };
  if (!after) {
    ASSERT_TRUE(reader_in(SYS_read)) << "the reader never blocked in read";
    rdma_destroy_event_channel(channel);
  }
  EXPECT_TRUE(reader_in(SYS_poll)) << "the reader returned: " << returned;
  EXPECT_FALSE(returned);
  reader.detach();  // it waits until this process exits
}

INSTANTIATE_TEST_SUITE_P(Channel, DestroyedChannel,
                         ::testing::Values(ReaderCame::kBeforeTheDestruction,
                                           ReaderCame::kAfterIt),
                         [](const auto& info) {
                           return info.param == ReaderCame::kAfterIt ? "ReaderCameAfter"
                                                                     : "ReaderCameBefore";
                         });

// What destruction keeps for late readers is bounded: the last few channels'
// read ends, not one per channel ever destroyed.
TEST(Channel, DestroyedChannelsKeepABoundedNumberOfFds) {
  const size_t before = open_fds();
  for (int i = 0; i < 64; ++i) rdma_destroy_event_channel(rdma_create_event_channel());
  EXPECT_LE(open_fds(), before + 8);
}

TEST(Ids, BadArgumentsAreEinval) {
  rdma_cm_id* id = nullptr;
  EXPECT_EQ(rdma_create_id(nullptr, nullptr, nullptr, RDMA_PS_TCP), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_create_id(nullptr, &id, nullptr, rdma_port_space(0x999)), -1);
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
  EXPECT_EQ(rdma_resolve_addr(id, nullptr, nullptr, 100), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_resolve_route(id, 100), -1);  // no address resolved
  EXPECT_EQ(errno, EINVAL);
  sockaddr_in remote = ipv4("192.0.2.1", 9);  // TEST-NET-1: not this host's
  EXPECT_EQ(rdma_bind_addr(id, as_sockaddr(remote)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  rdma_destroy_id(id);
}

// A connection call out of its state is EINVAL (rdma_connect before the route,
// rdma_accept without a request); what is not built yet says so (ENOSYS).
TEST(Ids, CallsOutOfStateOrNotOfferedFail) {
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
  rdma_conn_param param{};
  EXPECT_EQ(rdma_connect(id, &param), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_accept(id, &param), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_disconnect(id), -1);
  EXPECT_EQ(errno, EINVAL);
  rdma_destroy_id(id);
}

TEST(Strings, EventNames) {
  EXPECT_STREQ(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED");
  EXPECT_STREQ(rdma_event_str(rdma_cm_event_type(99)), "UNKNOWN EVENT");
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
