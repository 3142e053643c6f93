// Issue 14 defect 5: the packets the UDP transport drops (a bad ICRC, a datagram
// too short to be RoCEv2) are counted where `softrdma status` reads, beside the
// engine's counters: through the segment reader, as the command does.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/open_device.h"
#include "runtime/status_segment.h"

namespace softrdma::runtime {
namespace {

uint64_t counter(const std::vector<std::pair<std::string, uint64_t>>& counters,
                 const std::string& name) {
  for (const auto& [n, v] : counters)
    if (n == name) return v;
  ADD_FAILURE() << "no counter " << name;
  return 0;
}

// This process's report, as `softrdma status` reads it from /dev/shm.
StatusReport own_report() {
  int stale = 0;
  for (auto& r : read_status_segments(stale))
    if (r.pid == getpid()) return r;
  ADD_FAILURE() << "no segment of this process";
  return {};
}

// Sends `bytes` as one UDP datagram to the node's RoCEv2 address.
void send_datagram(OpenDevice& node, const std::vector<uint8_t>& bytes) {
  const auto gid = node.transport().local_gid();
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(node.transport().udp_port());
  std::memcpy(&to.sin_addr, gid.data() + 12, 4);  // ::ffff:a.b.c.d
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(sendto(fd, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
            ssize_t(bytes.size()));
  close(fd);
}

// Runs the engine on this thread until the transport has nothing left to read
// (no progress thread: nothing else takes the packets).
void drain(OpenDevice& node) {
  pollfd p{node.transport().rx_fd(), POLLIN, 0};
  for (int round = 0; round < 1000 && poll(&p, 1, 0) == 1; ++round) node.progress_inline();
}

TEST(StatusCountersTest, TransportDropsAreInTheStatus) {
  Settings settings;
  settings.progress_thread = false;
  std::string error;
  auto node = OpenDevice::open(settings, error);
  ASSERT_NE(node, nullptr) << error;
  ASSERT_NE(node->status(), nullptr);

  // An RC SEND_ONLY of 16 payload bytes to QP 2 whose ICRC is wrong.
  std::vector<uint8_t> bad_icrc(12 + 16 + 4, 0);
  bad_icrc[0] = 0x04;                    // RC SEND_ONLY
  bad_icrc[2] = bad_icrc[3] = 0xff;      // P_Key
  bad_icrc[7] = 2;                       // DestQP
  bad_icrc[bad_icrc.size() - 1] = 0x5a;  // not the ICRC
  send_datagram(*node, bad_icrc);
  send_datagram(*node, {0x04, 0x00, 0xff, 0xff});  // truncated: shorter than a BTH
  drain(*node);

  const StatusReport report = own_report();
  EXPECT_EQ(counter(report.transport_counters, "rx_bad_icrc"), 1u);
  EXPECT_EQ(counter(report.transport_counters, "rx_truncated"), 1u);
  EXPECT_EQ(counter(report.transport_counters, "rx_packets"), 0u);
  EXPECT_GT(counter(report.transport_counters, "rx_buffer_bytes"), 0u);
  EXPECT_EQ(counter(report.counters, "rx_packets"), 0u) << "none reached the engine";
}

}  // namespace
}  // namespace softrdma::runtime
