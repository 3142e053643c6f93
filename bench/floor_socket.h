// What the socket floors (udp_floor.cc, tcp_floor.cc) share: failing with the
// system's reason, and an IPv4 address from its text. Plain sockets, no library.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace floor_socket {

[[noreturn]] inline void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

inline sockaddr_in address(const char* ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) die("inet_pton");
  return a;
}

}  // namespace floor_socket
