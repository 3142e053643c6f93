// The TCP floors iWARP is compared with (bench/compare.py, issue 16): what any
// program gets from this kernel's TCP on loopback over one connection, with no
// RDMA protocol on top. iWARP's FPDUs ride on exactly such a connection.
//
//   tcp_floor pingpong server ADDR PORT            echo each SIZE-byte message back
//   tcp_floor pingpong client ADDR PORT N SIZE     N round trips, busy-polling;
//                                                  prints "rtt_us_median X"
//   tcp_floor stream server ADDR PORT              count bytes until the end;
//                                                  prints "gbps X"
//   tcp_floor stream client ADDR PORT SECONDS SIZE SIZE-byte writes for SECONDS
// TCP_NODELAY on both ends (as softrdma's iWARP connections). The ping-pong's
// ends busy-poll (MSG_DONTWAIT), as RDMA latency tests poll their CQs.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

using floor_socket::address;
using floor_socket::die;

void no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int accept_one(const sockaddr_in& at) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(listener, reinterpret_cast<const sockaddr*>(&at), sizeof at) != 0) die("bind");
  if (listen(listener, 1) != 0) die("listen");
  const int fd = accept(listener, nullptr, nullptr);
  if (fd < 0) die("accept");
  close(listener);
  no_delay(fd);
  return fd;
}

int connect_to(const sockaddr_in& to) {
  // The server may not listen yet: try for a few seconds.
  for (int attempt = 0; attempt < 300; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0) {
      no_delay(fd);
      return fd;
    }
    close(fd);
    usleep(10000);
  }
  die("connect");
}

// Receives exactly `size` bytes, spinning on MSG_DONTWAIT; false at the end.
bool receive_exactly(int fd, char* into, size_t size) {
  for (size_t got = 0; got < size;) {
    const ssize_t n = recv(fd, into + got, size - got, MSG_DONTWAIT);
    if (n == 0) return false;
    if (n > 0) got += size_t(n);
  }
  return true;
}

void send_all(int fd, const char* from, size_t size) {
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = send(fd, from + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) die("send");
    sent += size_t(n);
  }
}

int pingpong_server(const sockaddr_in& at) {
  const int fd = accept_one(at);
  uint32_t size = 0;
  if (!receive_exactly(fd, reinterpret_cast<char*>(&size), sizeof size)) return 1;
  std::vector<char> buffer(std::max<uint32_t>(size, 1));
  while (receive_exactly(fd, buffer.data(), size)) send_all(fd, buffer.data(), size);
  return 0;
}

int pingpong_client(const sockaddr_in& to, int iterations, uint32_t size) {
  const int fd = connect_to(to);
  send_all(fd, reinterpret_cast<const char*>(&size), sizeof size);
  std::vector<char> buffer(std::max<uint32_t>(size, 1), 'x');
  std::vector<double> rtt_us;
  rtt_us.reserve(size_t(iterations));
  for (int i = -iterations / 10; i < iterations; ++i) {  // a tenth to warm up
    const auto start = Clock::now();
    send_all(fd, buffer.data(), size);
    if (!receive_exactly(fd, buffer.data(), size)) die("the server left");
    if (i >= 0)
      rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  close(fd);
  std::nth_element(rtt_us.begin(), rtt_us.begin() + rtt_us.size() / 2, rtt_us.end());
  std::printf("rtt_us_median %.3f\n", rtt_us[rtt_us.size() / 2]);
  return 0;
}

int stream_server(const sockaddr_in& at) {
  const int fd = accept_one(at);
  std::vector<char> buffer(1 << 20);
  uint64_t bytes = 0;
  Clock::time_point first{};
  for (;;) {
    const ssize_t n = recv(fd, buffer.data(), buffer.size(), 0);
    if (n <= 0) break;
    if (bytes == 0) first = Clock::now();
    bytes += uint64_t(n);
  }
  const double s = std::chrono::duration<double>(Clock::now() - first).count();
  std::printf("gbps %.3f\n", double(bytes) * 8 / s / 1e9);
  return 0;
}

int stream_client(const sockaddr_in& to, double seconds, size_t size) {
  const int fd = connect_to(to);
  std::vector<char> payload(size, 'x');
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) send_all(fd, payload.data(), payload.size());
  close(fd);
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: tcp_floor pingpong server ADDR PORT | pingpong client ADDR PORT N SIZE |\n"
               "       stream server ADDR PORT | stream client ADDR PORT SECONDS SIZE\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return usage();
  const std::string test = argv[1], role = argv[2];
  const sockaddr_in at = address(argv[3], std::atoi(argv[4]));
  if (test == "pingpong" && role == "server") return pingpong_server(at);
  if (test == "pingpong" && role == "client" && argc == 7)
    return pingpong_client(at, std::atoi(argv[5]), uint32_t(std::atoi(argv[6])));
  if (test == "stream" && role == "server") return stream_server(at);
  if (test == "stream" && role == "client" && argc == 7)
    return stream_client(at, std::atof(argv[5]), size_t(std::atol(argv[6])));
  return usage();
}
