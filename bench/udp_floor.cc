// The floors softrdma is compared with (bench/compare.py): what any UDP program
// gets from this kernel on loopback, with no RDMA protocol on top.
//
//   udp_floor pingpong server ADDR PORT            echo every datagram back
//   udp_floor pingpong client ADDR PORT N SIZE     N round trips, busy-polling;
//                                                  prints "rtt_us_median X"
//   udp_floor stream server ADDR PORT MODE         count bytes until a 1-byte datagram
//   udp_floor stream client ADDR PORT MODE SECONDS [SIZE [SEGMENTS]]
//                                 datagrams of SIZE bytes (default 4 KiB) for
//                                 SECONDS; the server prints "gbps X" (payload)
// MODE: sendto (one datagram per call), sendmmsg (32 per call), gso (UDP_SEGMENT
// sends of as many segments as one UDP datagram holds, at most 64, received with
// UDP_GRO; SEGMENTS, if given, fewer: what a sender of shorter runs pays per
// datagram, docs/decisions/wire-speed.md). Both ends of the ping-pong busy-poll, as RDMA latency tests poll
// their CQs.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "floor_socket.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kDatagram = 4096;
constexpr int kBatch = 32;
constexpr size_t kMaxUdpPayload = 65507;  // IPv4's most in one UDP datagram
constexpr size_t kMaxGsoSegments = 64;    // the kernel's UDP_MAX_SEGMENTS

using floor_socket::address;
using floor_socket::die;

int udp_socket(const sockaddr_in* bind_to) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) die("socket");
  int size = 32 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size);
  if (bind_to != nullptr && bind(fd, reinterpret_cast<const sockaddr*>(bind_to), sizeof *bind_to))
    die("bind");
  return fd;
}

int pingpong_server(const sockaddr_in& at) {
  const int fd = udp_socket(&at);
  std::vector<char> buffer(65536);
  for (;;) {
    sockaddr_in from{};
    socklen_t length = sizeof from;
    const ssize_t n = recvfrom(fd, buffer.data(), buffer.size(), MSG_DONTWAIT,
                               reinterpret_cast<sockaddr*>(&from), &length);
    if (n <= 0) continue;
    if (n == 1) return 0;  // the client's "done"
    sendto(fd, buffer.data(), size_t(n), 0, reinterpret_cast<sockaddr*>(&from), length);
  }
}

// Busy-polls the reply (MSG_DONTWAIT), as an RDMA latency test polls its CQ.
int pingpong_client(const sockaddr_in& to, int iterations, size_t size) {
  const int fd = udp_socket(nullptr);
  std::vector<char> buffer(std::max<size_t>(size, 2), 'x');
  std::vector<double> rtt_us;
  rtt_us.reserve(size_t(iterations));
  for (int i = -iterations / 10; i < iterations; ++i) {  // a tenth to warm up
    const auto start = Clock::now();
    sendto(fd, buffer.data(), size, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
    while (recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT) < 0) {
    }
    if (i >= 0)
      rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  sendto(fd, "q", 1, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
  std::nth_element(rtt_us.begin(), rtt_us.begin() + rtt_us.size() / 2, rtt_us.end());
  std::printf("rtt_us_median %.3f\n", rtt_us[rtt_us.size() / 2]);
  return 0;
}

int stream_server(const sockaddr_in& at, const std::string& mode) {
  const int fd = udp_socket(&at);
  if (mode == "gso") {
    int on = 1;
    if (setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof on) != 0) die("UDP_GRO");
  }
  std::vector<char> buffers(size_t(kBatch) * 65536);
  mmsghdr msgs[kBatch];
  iovec iovs[kBatch];
  uint64_t bytes = 0;
  Clock::time_point first{};
  for (;;) {
    for (int i = 0; i < kBatch; ++i) {
      iovs[i] = {buffers.data() + size_t(i) * 65536, 65536};
      msgs[i] = mmsghdr{};
      msgs[i].msg_hdr.msg_iov = &iovs[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    const int n = recvmmsg(fd, msgs, kBatch, 0, nullptr);
    if (n <= 0) continue;
    if (bytes == 0) first = Clock::now();
    for (int i = 0; i < n; ++i) {
      if (msgs[i].msg_len == 1) {
        const double s = std::chrono::duration<double>(Clock::now() - first).count();
        std::printf("gbps %.3f\n", double(bytes) * 8 / s / 1e9);
        return 0;
      }
      bytes += msgs[i].msg_len;
    }
  }
}

// Sends datagrams of `size` bytes for `seconds`: one per sendto, kBatch per
// sendmmsg, or as many as fit one UDP datagram per UDP_SEGMENT message (kBatch
// messages per sendmmsg).
int stream_client(const sockaddr_in& to, const std::string& mode, double seconds, size_t size,
                  size_t most_segments) {
  const int fd = udp_socket(nullptr);
  const bool gso = mode == "gso";
  const size_t segments = std::min({most_segments, kMaxGsoSegments, kMaxUdpPayload / size});
  const size_t per_message = gso ? size * segments : size;
  std::vector<char> payload(per_message, 'x');
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(uint16_t))] = {};
  mmsghdr msgs[kBatch];
  iovec iov{payload.data(), payload.size()};
  for (auto& m : msgs) {
    m = mmsghdr{};
    m.msg_hdr.msg_name = const_cast<sockaddr_in*>(&to);
    m.msg_hdr.msg_namelen = sizeof to;
    m.msg_hdr.msg_iov = &iov;
    m.msg_hdr.msg_iovlen = 1;
    if (gso) {
      m.msg_hdr.msg_control = control;
      m.msg_hdr.msg_controllen = sizeof control;
    }
  }
  if (gso) {
    msghdr h{};
    h.msg_control = control;
    h.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    const uint16_t segment = uint16_t(size);
    std::memcpy(CMSG_DATA(c), &segment, sizeof segment);
  }
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (mode == "sendto") {
      sendto(fd, payload.data(), payload.size(), 0, reinterpret_cast<const sockaddr*>(&to),
             sizeof to);
    } else {
      sendmmsg(fd, msgs, kBatch, 0);
    }
  }
  for (int i = 0; i < 100; ++i) {  // "done", repeated: a datagram may be dropped
    sendto(fd, "q", 1, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
    usleep(1000);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: see the comment at the top of bench/udp_floor.cc\n");
    return 2;
  }
  const std::string test = argv[1], role = argv[2];
  const sockaddr_in at = address(argv[3], std::atoi(argv[4]));
  if (test == "pingpong" && role == "server") return pingpong_server(at);
  if (test == "pingpong" && role == "client" && argc == 7)
    return pingpong_client(at, std::atoi(argv[5]), size_t(std::atoi(argv[6])));
  if (test == "stream" && role == "server" && argc == 6) return stream_server(at, argv[5]);
  if (test == "stream" && role == "client" && argc >= 7 && argc <= 9) {
    const size_t size = argc >= 8 ? size_t(std::atoi(argv[7])) : kDatagram;
    if (size < 2 || size > kMaxUdpPayload) return 2;  // 1 byte is the "done" datagram
    const long segments = argc == 9 ? std::atol(argv[8]) : long(kMaxGsoSegments);
    if (segments < 1) return 2;
    return stream_client(at, argv[5], std::atof(argv[6]), size, size_t(segments));
  }
  std::fprintf(stderr, "udp_floor: bad arguments\n");
  return 2;
}
