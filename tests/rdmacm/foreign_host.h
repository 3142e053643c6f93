// A peer the agent knows only by its MADs: a UDP socket at 127.0.9.N:4791 that
// sends CM MADs to a listener's QP1 as a RoCEv2 host (Linux Soft-RoCE) frames
// them and reads what comes back, and a listener of a given port space. Tests
// feed the CM agent one MAD at a time and check what it emits and which events
// the application sees (soft_roce_replay_test.cc, port_space_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "rdmacm/rdmacm_fixture.h"
#include "wire/cm_gsi.h"
#include "wire/cm_mad.h"
#include "wire/icrc.h"

namespace softrdma::rdmacm::testing {

namespace w = softrdma::wire;

// A UDP socket at 127.0.9.N:4791, standing for the Soft-RoCE host.
struct ForeignHost {
  int fd = -1;
  sockaddr_in address{};
  ForeignHost() {
    for (int n = 10; n < 250 && fd < 0; ++n) {
      address = ipv4(("127.0.9." + std::to_string(n)).c_str(), 4791);
      fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (bind(fd, as_sockaddr(address), sizeof address) != 0) {
        close(fd);
        fd = -1;
      }
    }
  }
  ~ForeignHost() {
    if (fd >= 0) close(fd);
  }
  w::Gid gid() const { return w::gid_from_ipv4(ntohl(address.sin_addr.s_addr)); }

  // A MAD to QP1 of `server`, as Soft-RoCE frames it (UD SEND_ONLY, GSI Q_Key, ICRC).
  void send_mad(const std::array<uint8_t, w::kMadBytes>& mad, const w::Gid& server, uint32_t psn) {
    std::vector<uint8_t> packet(w::kGsiPacketBytes);
    w::GsiSend gsi;
    gsi.psn = psn;
    w::build_gsi_packet(packet, gsi, mad);
    w::IpUdpInfo info{.src = gid(), .dst = server, .src_port = 4791, .dst_port = 4791};
    w::write_icrc(info, packet);
    sockaddr_in to = ipv4("127.0.0.1", 4791);
    std::memcpy(&to.sin_addr, server.data() + 12, 4);
    ASSERT_EQ(sendto(fd, packet.data(), packet.size(), 0, as_sockaddr(to), sizeof to),
              ssize_t(packet.size()));
  }

  // The next CM MAD that arrives (a 30 s guard against a hang).
  std::optional<std::vector<uint8_t>> receive_mad() {
    std::vector<uint8_t> packet(2048);
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 30000) != 1) return std::nullopt;
      ssize_t n = recv(fd, packet.data(), packet.size(), 0);
      if (n <= 0) return std::nullopt;
      w::PacketView view;
      if (w::parse_packet(std::span<uint8_t>(packet.data(), size_t(n)), view) != w::ParseError::kNone)
        continue;
      auto mad = w::gsi_mad(view);
      if (!mad.empty()) return std::vector<uint8_t>(mad.begin(), mad.end());
    }
  }
};

// A listener of port space `ps` on 127.0.0.1 and its device's GID.
struct Listener {
  rdma_event_channel* channel = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  uint16_t port = free_port();
  w::Gid gid{};
  explicit Listener(rdma_port_space ps) {
    EXPECT_EQ(rdma_create_id(channel, &id, nullptr, ps), 0);
    sockaddr_in address = ipv4("127.0.0.1", port);
    EXPECT_EQ(rdma_bind_addr(id, as_sockaddr(address)), 0);
    EXPECT_EQ(rdma_listen(id, 4), 0);
    ibv_gid server{};
    EXPECT_EQ(ibv_query_gid(id->verbs, 1, 1, &server), 0);
    std::memcpy(gid.data(), server.raw, 16);
  }
  ~Listener() {
    rdma_destroy_id(id);
    rdma_destroy_event_channel(channel);
  }
  bool has_event(int timeout_ms) {
    pollfd p{channel->fd, POLLIN, 0};
    return poll(&p, 1, timeout_ms) == 1;
  }
};

}  // namespace softrdma::rdmacm::testing
