// A TCP listener on 127.0.0.1 at a port the kernel picks, for tests that need a
// plain socket peer (the iWARP family's connections, TcpStreams' closing).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace softrdma::testing_support {

// The listening descriptor, with its address in `at`; -1 when the kernel refused.
inline int listen_on_loopback(sockaddr_in& at) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  at = sockaddr_in{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof at;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&at), &length) != 0) {
    if (listener >= 0) ::close(listener);
    return -1;
  }
  return listener;
}

}  // namespace softrdma::testing_support
