// The steering program of a host's shared UDP 4791 (docs/decisions/host-rnic.md)
// against a real SO_REUSEPORT group of sockets on a loopback address: probes tell
// each socket its index, packets reach the socket of their QPN's slot, and after a
// member leaves the probes find the group's new order.
#include "transport/udp/reuseport_steering.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <vector>

namespace softrdma::transport::udp {
namespace {

constexpr uint64_t kNonce = 0x5eed'0000'1234'abcdull;

class ReuseportGroup : public ::testing::Test {
 protected:
  void TearDown() override {
    for (int fd : members_)
      if (fd >= 0) close(fd);
    if (sender_ >= 0) close(sender_);
  }

  // Adds a socket to the group (the first picks the port); returns its position.
  size_t join() {
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    EXPECT_GE(fd, 0);
    const int one = 1;
    EXPECT_EQ(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one), 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = port_;
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << errno;
    socklen_t length = sizeof address;
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = address.sin_port;
    members_.push_back(fd);
    return members_.size() - 1;
  }

  void leave(size_t member) {
    close(members_[member]);
    members_[member] = -1;
  }

  void send_payload(std::span<const uint8_t> payload) {
    if (sender_ < 0) sender_ = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = port_;
    ASSERT_EQ(sendto(sender_, payload.data(), payload.size(), 0, reinterpret_cast<sockaddr*>(&to),
                     sizeof to),
              ssize_t(payload.size()));
  }

  // Waits for the next datagram at any member; its member and bytes. -1: none
  // within the limit (a failure, not a pace).
  int receive(std::vector<uint8_t>& payload) {
    std::vector<pollfd> fds;
    for (int fd : members_) fds.push_back({fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 10'000) <= 0) return -1;
    for (size_t i = 0; i < fds.size(); ++i) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      payload.resize(2048);
      const ssize_t n = recv(fds[i].fd, payload.data(), payload.size(), 0);
      if (n < 0) return -1;
      payload.resize(size_t(n));
      return int(i);
    }
    return -1;
  }

  // Probes 0..n-1; which member each reached (by index).
  std::map<uint32_t, int> probe(uint32_t n) {
    std::map<uint32_t, int> found;
    for (uint32_t k = 0; k < n; ++k) send_payload(make_probe(k, kNonce));
    for (uint32_t k = 0; k < n; ++k) {
      std::vector<uint8_t> payload;
      const int member = receive(payload);
      uint32_t index = 0;
      EXPECT_GE(member, 0);
      EXPECT_TRUE(read_probe(payload, kNonce, index));
      found[index] = member;
    }
    return found;
  }

  // A BTH (IBA 9.2) for destination `qpn`, with a few bytes after it.
  void send_to_qpn(uint32_t qpn) {
    std::array<uint8_t, 32> packet{};
    packet[0] = 0x0a;  // RC RDMA WRITE Only
    packet[5] = uint8_t(qpn >> 16);
    packet[6] = uint8_t(qpn >> 8);
    packet[7] = uint8_t(qpn);
    send_payload(packet);
  }
  int member_receiving_qpn(uint32_t qpn) {
    send_to_qpn(qpn);
    std::vector<uint8_t> payload;
    const int member = receive(payload);
    EXPECT_EQ(payload.size(), 32u);
    return member;
  }

  void attach(std::span<const SlotIndex> members) {
    const std::vector<sock_filter> program = steering_program(members);
    for (int fd : members_) {
      if (fd < 0) continue;
      ASSERT_EQ(attach_steering(fd, program), 0);
      return;
    }
  }

  std::vector<int> members_;
  int sender_ = -1;
  in_port_t port_ = 0;
};

TEST_F(ReuseportGroup, ProbesTellEachSocketItsIndexInJoinOrder) {
  for (int i = 0; i < 3; ++i) join();
  attach({});
  const std::map<uint32_t, int> found = probe(3);
  EXPECT_EQ(found, (std::map<uint32_t, int>{{0, 0}, {1, 1}, {2, 2}}));
}

TEST_F(ReuseportGroup, PacketsReachTheSocketOfTheirQpnsSlot) {
  for (int i = 0; i < 3; ++i) join();
  // Slots given out of index order, the highest slot among them.
  const std::vector<SlotIndex> members{{5, 2}, {9, 0}, {kMaxSlot, 1}};
  attach(members);
  EXPECT_EQ(member_receiving_qpn(5u << kSlotShift | 7), 2);
  EXPECT_EQ(member_receiving_qpn(9u << kSlotShift | 1), 0);
  EXPECT_EQ(member_receiving_qpn(kMaxSlot << kSlotShift | ((1u << kSlotShift) - 1)), 1);
  // Many QPs of one slot: all to its socket.
  for (uint32_t n = 2; n < 40; n += 3) EXPECT_EQ(member_receiving_qpn(9u << kSlotShift | n), 0);
  // QP1 (CM MADs) and a slot nobody serves reach one member each, by the hash.
  EXPECT_GE(member_receiving_qpn(1), 0);
  EXPECT_GE(member_receiving_qpn(77u << kSlotShift | 3), 0);
}

TEST_F(ReuseportGroup, AfterAMemberLeavesProbesFindTheNewOrder) {
  for (int i = 0; i < 3; ++i) join();
  attach({});
  ASSERT_EQ(probe(3).size(), 3u);
  leave(0);
  // The kernel moved the last member into the hole (../shared/facts): the probes
  // say so without being told.
  const std::map<uint32_t, int> found = probe(2);
  EXPECT_EQ(found, (std::map<uint32_t, int>{{0, 2}, {1, 1}}));
  const std::vector<SlotIndex> members{{3, 1}, {4, 0}};  // member 1 serves slot 3, member 2 slot 4
  attach(members);
  EXPECT_EQ(member_receiving_qpn(3u << kSlotShift | 11), 1);
  EXPECT_EQ(member_receiving_qpn(4u << kSlotShift | 11), 2);
}

TEST_F(ReuseportGroup, TheLargestProgramIsAccepted) {
  join();
  std::vector<SlotIndex> members;
  for (uint32_t slot = 1; slot <= kMaxSlot; ++slot) members.push_back({slot, slot == kMaxSlot ? 0u : 5u});
  const std::vector<sock_filter> program = steering_program(members);
  EXPECT_LE(program.size(), size_t(BPF_MAXINSNS));
  ASSERT_EQ(attach_steering(members_[0], program), 0);
  EXPECT_EQ(member_receiving_qpn(kMaxSlot << kSlotShift | 1), 0);
}

TEST(Probe, OnlyAProbeOfThisRoundIsRead) {
  uint32_t index = 0;
  const auto probe = make_probe(0x01020304, kNonce);
  EXPECT_TRUE(read_probe(probe, kNonce, index));
  EXPECT_EQ(index, 0x01020304u);
  EXPECT_FALSE(read_probe(probe, kNonce + 1, index));
  EXPECT_FALSE(read_probe(std::span(probe).first(kProbeBytes - 1), kNonce, index));
  auto not_a_probe = probe;
  not_a_probe[0] = 0x0a;
  EXPECT_FALSE(read_probe(not_a_probe, kNonce, index));
}

TEST(SteeringProgram, SlotsMatchWhatTheQpnCarries) {
  EXPECT_EQ(slot_of_qpn(1), 0u);  // QP1 is nobody's
  EXPECT_EQ(slot_of_qpn(kMaxSlot << kSlotShift | 5), kMaxSlot);
  EXPECT_EQ(slot_of_qpn(0xffffffff), kMaxSlot);  // only 24 bits count
}

}  // namespace
}  // namespace softrdma::transport::udp
