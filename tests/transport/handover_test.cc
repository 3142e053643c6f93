// The hand-over channel of a host's shared UDP 4791 (docs/decisions/host-rnic.md
// point 4): packets pass between the slots of one group with their addresses; a
// slot nobody serves, a full owner, a malformed datagram, another user's datagram
// and another group are each refused or dropped, and counted.
#include "transport/udp/handover.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <vector>

namespace softrdma::transport::udp {
namespace {

// A group name like the registry's, unique to this process and worktree.
std::string group(const char* tag) {
  return "/dev/shm/softrdma-host-test-handover-" + std::to_string(getpid()) + "-" + tag;
}

std::unique_ptr<Handover> open_or_fail(const std::string& name, uint32_t slot) {
  std::string why;
  auto handover = Handover::open(name, slot, why);
  EXPECT_NE(handover, nullptr) << why;
  return handover;
}

// Waits until `fd` has something to read; false after 10 s (a failure bound, not a pace).
bool readable(int fd, int timeout_ms = 10'000) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

std::vector<uint8_t> pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = uint8_t(seed + i * 7);
  return bytes;
}

const Gid kSource = wire::gid_from_ipv4(0x0a000001);       // 10.0.0.1
const Gid kDestination = wire::gid_from_ipv4(0x7f000002);  // 127.0.0.2
const Gid kSource6 = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42};

// Sends raw bytes to `name` (an abstract address, leading NUL included), as a
// process that is not a Handover would.
ssize_t send_raw(const std::string& name, const void* bytes, size_t size) {
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, name.data(), name.size());
  const ssize_t rc = sendto(fd, bytes, size, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&address),
                            socklen_t(offsetof(sockaddr_un, sun_path) + name.size()));
  close(fd);
  return rc;
}

HandoverHeader valid_header(uint32_t length) {
  return HandoverHeader{.magic = kHandoverMagic,
                        .version = kHandoverVersion,
                        .source_port = 1,
                        .from_slot = 99,
                        .length = length,
                        .source = kSource,
                        .destination = kDestination};
}

TEST(Handover, PacketsOfEverySizeKeepTheirAddresses) {
  const std::string name = group("sizes");
  auto a = open_or_fail(name, 3), b = open_or_fail(name, 7);
  ASSERT_TRUE(a && b);
  // From one byte to an MTU-4096 packet with BTH, RETH, ImmDt and ICRC, and the largest.
  const size_t sizes[] = {1, 16, 60, 256, 1024, 4096, 4096 + 12 + 16 + 4 + 4, kHandoverMaxPacket};
  uint8_t seed = 1;
  for (size_t size : sizes) {
    const std::vector<uint8_t> bytes = pattern(size, seed++);
    const Gid& source = size % 2 ? kSource : kSource6;
    // Some packets arrived marked CE: the mark travels with it.
    const bool ce = size % 3 == 0;
    ASSERT_TRUE(a->send(7, source, uint16_t(0xC000 | size), kDestination, bytes, ce)) << size;
    ASSERT_TRUE(readable(b->fd())) << size;
    Handover::Received got[4];
    ASSERT_EQ(b->receive(got), 1u) << size;
    EXPECT_EQ(got[0].congestion_experienced, ce) << size;
    EXPECT_EQ(got[0].source, source);
    EXPECT_EQ(got[0].source_port, uint16_t(0xC000 | size));
    EXPECT_EQ(got[0].destination, kDestination);
    EXPECT_EQ(got[0].from_slot, 3u);
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), got[0].packet.begin(), got[0].packet.end()))
        << size;
  }
  // And back: the other direction is the same channel.
  const std::vector<uint8_t> reply = pattern(100, 9);
  ASSERT_TRUE(b->send(3, kSource6, 4791, kDestination, reply));
  ASSERT_TRUE(readable(a->fd()));
  Handover::Received got[1];
  ASSERT_EQ(a->receive(got), 1u);
  EXPECT_EQ(got[0].from_slot, 7u);
  EXPECT_EQ(got[0].packet.size(), reply.size());
  // One byte more than the largest is refused before any system call.
  EXPECT_FALSE(a->send(7, kSource, 1, kDestination, pattern(kHandoverMaxPacket + 1, 0)));
  EXPECT_EQ(a->counters().send_too_large.load(), 1u);
  EXPECT_EQ(a->counters().sent.load(), std::size(sizes));
  EXPECT_EQ(b->counters().received.load(), std::size(sizes));
  EXPECT_EQ(b->counters().dropped_malformed.load(), 0u);
  EXPECT_EQ(b->counters().dropped_foreign_user.load(), 0u);
}

// A burst: each owner gets its packets in one datagram, in the order queued, read
// back one by one even when the caller takes fewer at a time than a datagram holds.
TEST(Handover, ABurstReachesEachOwnerInOneDatagramInOrder) {
  const std::string name = group("burst");
  auto a = open_or_fail(name, 3), b = open_or_fail(name, 7), c = open_or_fail(name, 9);
  ASSERT_TRUE(a && b && c);
  std::vector<std::vector<uint8_t>> packets;
  for (size_t i = 0; i < 40; ++i)
    packets.push_back(pattern(60 + 1024 * (i % 3) + i % 5, uint8_t(i)));
  for (size_t i = 0; i < packets.size(); ++i)  // interleaved: 7, 9, 7, 9, ...
    ASSERT_TRUE(a->queue(i % 2 ? 9 : 7, kSource, uint16_t(i), kDestination, packets[i]));
  const Handover::Flushed flushed = a->flush();
  EXPECT_EQ(flushed.sent, packets.size());
  EXPECT_EQ(flushed.failed, 0u);
  EXPECT_EQ(a->counters().sent.load(), packets.size());
  EXPECT_EQ(a->counters().sent_datagrams.load(), 2u);  // one for each owner
  for (Handover* owner : {b.get(), c.get()}) {
    const size_t parity = owner == b.get() ? 0 : 1;
    size_t next = parity;
    Handover::Received got[3];  // fewer than a datagram holds
    while (next < packets.size() && (owner->pending() || readable(owner->fd()))) {
      for (size_t k = owner->receive(got), j = 0; j < k; ++j, next += 2) {
        EXPECT_EQ(got[j].source_port, uint16_t(next));
        EXPECT_TRUE(std::equal(packets[next].begin(), packets[next].end(), got[j].packet.begin(),
                               got[j].packet.end()))
            << next;
      }
    }
    EXPECT_EQ(next, packets.size() + parity);
    EXPECT_EQ(owner->counters().dropped_malformed.load(), 0u);
  }
  // Nothing is left queued: a second flush sends nothing.
  EXPECT_EQ(a->flush().sent, 0u);
  EXPECT_EQ(a->counters().sent_datagrams.load(), 2u);
}

// More than fits one datagram (64 KiB) for one owner, and more than queue() holds:
// split into several datagrams, nothing lost; an owner nobody serves: counted once
// per packet.
TEST(Handover, ALargeBurstIsSplitAndANobodysIsCounted) {
  const std::string name = group("large");
  auto a = open_or_fail(name, 3), b = open_or_fail(name, 7);
  ASSERT_TRUE(a && b);
  const std::vector<uint8_t> packet = pattern(4096 + 32, 1);
  constexpr size_t kCount = Handover::kMaxQueued + 30;
  for (size_t i = 0; i < kCount; ++i)
    ASSERT_TRUE(a->queue(7, kSource, uint16_t(i), kDestination, packet));
  for (size_t i = 0; i < 5; ++i) ASSERT_TRUE(a->queue(11, kSource, 1, kDestination, packet));
  const Handover::Flushed flushed = a->flush();
  EXPECT_EQ(flushed.sent, kCount);
  EXPECT_EQ(flushed.failed, 5u);
  EXPECT_EQ(a->counters().send_no_owner.load(), 5u);
  const size_t per_datagram = kHandoverDatagramBytes / (sizeof(HandoverHeader) + packet.size());
  EXPECT_GE(a->counters().sent_datagrams.load(), (kCount + per_datagram - 1) / per_datagram);
  EXPECT_LE(a->counters().sent_datagrams.load(), kCount / 4);
  size_t received = 0;
  uint16_t expected_port = 0;
  Handover::Received got[Handover::kRing];
  while (received < kCount && (b->pending() || readable(b->fd()))) {
    for (size_t k = b->receive(got), j = 0; j < k; ++j, ++received)
      EXPECT_EQ(got[j].source_port, expected_port++);
  }
  EXPECT_EQ(received, kCount);
}

// With doorbells (the registry's, in shared memory; here an array): a send rings
// its receiver's after queueing, and a receiver reads its socket only when its own
// rang, so a datagram that came without a ring waits until the next one.
TEST(Handover, TheSocketIsReadWhenTheDoorbellRang) {
  const std::string name = group("doorbell");
  auto a = open_or_fail(name, 3), b = open_or_fail(name, 7);
  ASSERT_TRUE(a && b);
  std::atomic<uint32_t> bells[8] = {};
  const auto bell_of = [&bells](uint32_t slot) { return slot < 8 ? &bells[slot] : nullptr; };
  a->set_doorbells(bell_of);
  b->set_doorbells(bell_of);
  Handover::Received got[4];
  EXPECT_EQ(b->receive(got), 0u);  // the first read, whatever came before
  EXPECT_EQ(bells[7].load(), 0u);
  // Sent by a process without doorbells: queued, but not read while 7's is silent.
  HandoverHeader header = valid_header(64);
  std::vector<uint8_t> raw(sizeof header + 64);
  std::memcpy(raw.data(), &header, sizeof header);
  ASSERT_EQ(send_raw(b->name_of(7), raw.data(), raw.size()), ssize_t(raw.size()));
  ASSERT_TRUE(readable(b->fd()));
  EXPECT_EQ(b->receive(got), 0u);
  // A Handover's send rings: both datagrams are read, and the bell is silent again.
  ASSERT_TRUE(a->send(7, kSource, 1, kDestination, pattern(64, 3)));
  EXPECT_EQ(bells[7].load(), 1u);
  EXPECT_EQ(b->receive(got), 2u);
  EXPECT_EQ(bells[7].load(), 0u);
  EXPECT_EQ(b->receive(got), 0u);
  // A flushed burst rings too (queue() keeps the bytes' place until flush()).
  const std::vector<uint8_t> queued = pattern(64, 4);
  ASSERT_TRUE(a->queue(7, kSource, 1, kDestination, queued));
  ASSERT_EQ(a->flush().sent, 1u);
  EXPECT_EQ(bells[7].load(), 1u);
  EXPECT_EQ(b->receive(got), 1u);
}

TEST(Handover, ASlotNobodyServesIsRefusedAndCounted) {
  auto a = open_or_fail(group("nobody"), 3);
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->send(11, kSource, 1, kDestination, pattern(64, 0)));
  EXPECT_EQ(a->counters().send_no_owner.load(), 1u);
  EXPECT_EQ(a->counters().sent.load(), 0u);
}

TEST(Handover, AFullOwnerRefusesWithoutBlocking) {
  const std::string name = group("full");
  auto a = open_or_fail(name, 3), b = open_or_fail(name, 7);
  ASSERT_TRUE(a && b);
  const std::vector<uint8_t> bytes = pattern(1024, 5);
  // Nobody reads b: sends succeed until its queue is full, then fail at once.
  size_t accepted = 0;
  while (accepted < 1'000'000 && a->send(7, kSource, 1, kDestination, bytes)) ++accepted;
  ASSERT_LT(accepted, 1'000'000u) << "the owner's queue never filled";
  EXPECT_EQ(a->counters().send_full.load(), 1u);
  EXPECT_EQ(a->counters().sent.load(), accepted);
  std::printf("[          ] an owner that does not read holds %zu hand-overs of 1 KiB\n", accepted);
  // Everything accepted is there, and the channel works again once read.
  size_t drained = 0;
  Handover::Received got[Handover::kRing];
  while (drained < accepted && readable(b->fd())) drained += b->receive(got);
  EXPECT_EQ(drained, accepted);
  EXPECT_TRUE(a->send(7, kSource, 1, kDestination, bytes));
}

TEST(Handover, MalformedDatagramsAreDroppedAndCounted) {
  const std::string name = group("malformed");
  auto a = open_or_fail(name, 3), b = open_or_fail(name, 7);
  ASSERT_TRUE(a && b);
  const std::string to = b->name_of(7);
  std::vector<uint8_t> datagram(sizeof(HandoverHeader) + 64);
  auto write = [&](const HandoverHeader& header, size_t size) {
    datagram.resize(size);
    std::memcpy(datagram.data(), &header, sizeof header);
    return send_raw(to, datagram.data(), datagram.size()) == ssize_t(size);
  };
  HandoverHeader bad_magic = valid_header(64);
  bad_magic.magic ^= 1;
  HandoverHeader bad_version = valid_header(64);
  bad_version.version = kHandoverVersion + 1;
  ASSERT_TRUE(write(bad_magic, sizeof(HandoverHeader) + 64));
  ASSERT_TRUE(write(bad_version, sizeof(HandoverHeader) + 64));
  ASSERT_TRUE(write(valid_header(65), sizeof(HandoverHeader) + 64));  // longer than what is left
  ASSERT_EQ(send_raw(to, "short", 5), 5);                             // shorter than a header
  // Longer than a receive buffer, its header claiming what fits: only MSG_TRUNC tells.
  ASSERT_TRUE(write(valid_header(uint32_t(kHandoverMaxPacket)), kHandoverDatagramBytes + 100));
  // Then a good one: the only packet returned.
  ASSERT_TRUE(a->send(7, kSource, 1, kDestination, pattern(64, 3)));
  size_t returned = 0;
  Handover::Received got[Handover::kRing];
  while (b->counters().dropped_malformed.load() + returned < 6 && readable(b->fd()))
    returned += b->receive(got);
  EXPECT_EQ(returned, 1u);
  EXPECT_EQ(b->counters().dropped_malformed.load(), 5u);
  EXPECT_EQ(b->counters().received.load(), 1u);
}

// In a child of another user (nobody): a Handover of the same group sends to slot
// 7; claiming our uid instead is refused by the kernel. Exit code: 0 when both held.
[[noreturn]] void send_as_nobody(const std::string& name) {
  if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(10);
  std::string why;
  auto intruder = Handover::open(name, 9, why);
  if (!intruder) _exit(11);
  if (!intruder->send(7, kSource, 1, kDestination, pattern(64, 4))) _exit(12);
  // A forged SCM_CREDENTIALS naming root: the kernel must refuse it (EPERM).
  HandoverHeader header = valid_header(0);
  iovec iov{&header, sizeof header};
  alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(ucred))] = {};
  msghdr message{};
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string to = intruder->name_of(7);
  std::memcpy(address.sun_path, to.data(), to.size());
  message.msg_name = &address;
  message.msg_namelen = socklen_t(offsetof(sockaddr_un, sun_path) + to.size());
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&message);
  *c = cmsghdr{
      .cmsg_len = CMSG_LEN(sizeof(ucred)), .cmsg_level = SOL_SOCKET, .cmsg_type = SCM_CREDENTIALS};
  const ucred forged{.pid = getpid(), .uid = 0, .gid = 0};
  std::memcpy(CMSG_DATA(c), &forged, sizeof forged);
  if (sendmsg(intruder->fd(), &message, MSG_DONTWAIT) >= 0 || errno != EPERM) _exit(13);
  _exit(0);
}

TEST(Handover, AnotherUsersDatagramIsDroppedAndCounted) {
  if (geteuid() != 0)
    GTEST_SKIP() << "needs root to run a child as another user (setresuid to nobody)";
  const std::string name = group("foreign");
  auto a = open_or_fail(name, 3), b = open_or_fail(name, 7);
  ASSERT_TRUE(a && b);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) send_as_nobody(name);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "10: setresuid, 11: open, 12: send, 13: forged uid sent";
  // The child's datagram is queued before it exits; ours follows it.
  ASSERT_TRUE(a->send(7, kSource, 1, kDestination, pattern(64, 3)));
  size_t returned = 0;
  Handover::Received got[Handover::kRing];
  while (b->counters().dropped_foreign_user.load() + returned < 2 && readable(b->fd()))
    returned += b->receive(got);
  EXPECT_EQ(returned, 1u);
  EXPECT_EQ(got[0].from_slot, 3u);
  EXPECT_EQ(b->counters().dropped_foreign_user.load(), 1u);
}

// Clears CAP_SYS_ADMIN from this process's effective capabilities.
bool drop_sys_admin() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  data[CAP_SYS_ADMIN / 32].effective &= ~(1u << (CAP_SYS_ADMIN % 32));
  return syscall(SYS_capset, &header, data) == 0;
}

TEST(Handover, AForkedChildSendsThroughItsParentsSocket) {
  const std::string name = group("fork");
  auto a = open_or_fail(name, 3), b = open_or_fail(name, 7);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->send(7, kSource, 1, kDestination, pattern(16, 1)));  // the parent's pid is kept
  // The child inherits `a`, whose credentials still name the parent's pid.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Root (CI) may name any pid (CAP_SYS_ADMIN, scm_check_creds): give that up, as
    // an ordinary user's process never had it.
    if (!drop_sys_admin()) _exit(2);
    _exit(a->send(7, kSource, 2, kDestination, pattern(16, 2)) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: send failed, 2: capset";
  size_t returned = 0;
  Handover::Received got[Handover::kRing];
  while (returned < 2 && readable(b->fd()))
    returned += b->receive(std::span(got + returned, 2 - returned));
  ASSERT_EQ(returned, 2u);
  EXPECT_EQ(got[1].source_port, 2u);
}

TEST(Handover, GroupsWithTheSameSlotsDoNotMeet) {
  const std::string one = group("one"), two = group("two");
  auto a1 = open_or_fail(one, 3), b1 = open_or_fail(one, 7), b2 = open_or_fail(two, 7);
  ASSERT_TRUE(a1 && b1 && b2);
  ASSERT_TRUE(a1->send(7, kSource, 1, kDestination, pattern(32, 1)));
  ASSERT_TRUE(readable(b1->fd()));
  // A local send is queued when sendmsg returns: nothing can still be on its way to b2.
  EXPECT_FALSE(readable(b2->fd(), 0));
  // A second socket for a slot that is served is refused, and says why.
  std::string why;
  EXPECT_EQ(Handover::open(one, 7, why), nullptr);
  EXPECT_NE(why.find("serves that slot"), std::string::npos) << why;
}

TEST(Handover, LongGroupNamesAreHashedAndStayApart) {
  const std::string base = group("long") + std::string(200, 'x');
  auto a = open_or_fail(base + "1", 3), b1 = open_or_fail(base + "1", 7),
       b2 = open_or_fail(base + "2", 7);
  ASSERT_TRUE(a && b1 && b2);
  EXPECT_LE(a->name_of(7).size(), sizeof(sockaddr_un::sun_path));
  EXPECT_NE(b1->name_of(7), b2->name_of(7));
  ASSERT_TRUE(a->send(7, kSource, 1, kDestination, pattern(32, 1)));
  ASSERT_TRUE(readable(b1->fd()));
  EXPECT_FALSE(readable(b2->fd(), 0));
}

}  // namespace
}  // namespace softrdma::transport::udp
