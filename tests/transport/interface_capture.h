// IPv4 packets seen on one interface through an AF_PACKET socket (needs
// CAP_NET_RAW), for the tests of what the kernel really sends (KernelFacts).
// A BPF filter keeps only UDP to the wanted port, so other traffic on a busy
// interface (other tests, other processes) cannot fill the socket's buffer.
#pragma once

#include <linux/filter.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "support/pcap_reader.h"
#include "transport/transport_test_util.h"

namespace softrdma::transport::testing {

class InterfaceCapture {
 public:
  ~InterfaceCapture() {
    if (fd_ >= 0) close(fd_);
  }
  // Captures UDP datagrams to `dst_port` on `interface` (SOCK_DGRAM: from the IP
  // header on). `outgoing`: the datagrams this host sends out of the interface,
  // as the device gets them (a socket for ETH_P_IP sees only what comes in; on lo
  // what goes out comes back in).
  // `src_ipv4` (host order), when not 0: only datagrams from that address, so
  // that other tests' RoCEv2 traffic to the same port on lo (ctest runs two at
  // once) cannot fill the buffer either (a CI run lost the one datagram it
  // waited for so, 2026-11-30).
  bool open(const std::string& interface, uint16_t dst_port, std::string& why,
            bool outgoing = false, uint32_t src_ipv4 = 0) {
    outgoing_ = outgoing;
    const uint16_t protocol = outgoing ? ETH_P_ALL : ETH_P_IP;
    fd_ = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(protocol));
    if (fd_ < 0) {
      why = std::string("AF_PACKET socket: ") + strerror(errno);
      return false;
    }
    // IPv4 header at 0 (SOCK_DGRAM): the source address (bytes 12-15) ==
    // src_ipv4 when asked, protocol byte 9 == UDP, UDP destination port (after
    // an IHL-sized header) == dst_port. Jumps are relative; the last is reject.
    std::vector<sock_filter> code;
    if (src_ipv4 != 0) {
      code.push_back({BPF_LD | BPF_W | BPF_ABS, 0, 0, 12});
      code.push_back({BPF_JMP | BPF_JEQ | BPF_K, 0, 6, src_ipv4});
    }
    const sock_filter udp_to_port[] = {
        {BPF_LD | BPF_B | BPF_ABS, 0, 0, 9},
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 4, IPPROTO_UDP},
        {BPF_LDX | BPF_B | BPF_MSH, 0, 0, 0},
        {BPF_LD | BPF_H | BPF_IND, 0, 0, 2},
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, dst_port},
        {BPF_RET | BPF_K, 0, 0, 0xffff},
        {BPF_RET | BPF_K, 0, 0, 0},
    };
    code.insert(code.end(), std::begin(udp_to_port), std::end(udp_to_port));
    sock_fprog program{uint16_t(code.size()), code.data()};
    setsockopt(fd_, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof program);
    int buffer = 8 << 20;
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer);
    sockaddr_ll where{};
    where.sll_family = AF_PACKET;
    where.sll_protocol = htons(protocol);
    where.sll_ifindex = int(if_nametoindex(interface.c_str()));
    timeval timeout{0, 100'000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    if (where.sll_ifindex == 0 ||
        bind(fd_, reinterpret_cast<sockaddr*>(&where), sizeof where) != 0) {
      why = "bind to " + interface + ": " + strerror(errno);
      return false;
    }
    dst_port_ = dst_port;
    return true;
  }
  // The next datagram from `src`, as IP/UDP facts + payload (waits up to 5 s: a
  // bound against hanging, not a speed assertion).
  std::optional<test::RoceFrame> next(const wire::Gid& src) {
    std::vector<uint8_t> buffer(65536);
    const int64_t give_up = now_ms() + 5000;
    while (now_ms() < give_up) {
      sockaddr_ll from{};
      socklen_t from_length = sizeof from;
      const ssize_t n = recvfrom(fd_, buffer.data(), buffer.size(), 0,
                                 reinterpret_cast<sockaddr*>(&from), &from_length);
      if (n <= 0) continue;
      if (outgoing_ && (from.sll_pkttype != PACKET_OUTGOING ||
                        from.sll_protocol != htons(ETH_P_IP)))
        continue;
      auto frame = test::decode_udp_frame(test::link_type::kIpv4,
                                          std::span<const uint8_t>(buffer.data(), size_t(n)),
                                          dst_port_);
      if (frame && frame->ip.src == src) return frame;
    }
    return std::nullopt;
  }

 private:
  int fd_ = -1;
  uint16_t dst_port_ = 0;
  bool outgoing_ = false;
};

}  // namespace softrdma::transport::testing
