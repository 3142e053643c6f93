#include "runtime/address_watcher.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace softrdma::runtime {

std::unique_ptr<AddressWatcher> AddressWatcher::start(std::function<void()> changed,
                                                      std::string& error) {
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd < 0) {
    error = std::string("softrdma: cannot open a netlink socket: ") + std::strerror(errno);
    return nullptr;
  }
  // The address groups of both families: any user may join them.
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  local.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
  const int stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 || stop < 0) {
    error = std::string("softrdma: cannot watch the host's addresses: ") + std::strerror(errno);
    close(fd);
    if (stop >= 0) close(stop);
    return nullptr;
  }
  return std::unique_ptr<AddressWatcher>(new AddressWatcher(fd, stop, std::move(changed)));
}

AddressWatcher::AddressWatcher(int netlink_fd, int stop_fd, std::function<void()> changed)
    : netlink_fd_(netlink_fd), stop_fd_(stop_fd), changed_(std::move(changed)) {
  thread_ = std::thread([this] { run(); });
}

AddressWatcher::~AddressWatcher() {
  const uint64_t one = 1;
  (void)!write(stop_fd_, &one, sizeof one);
  thread_.join();
  close(netlink_fd_);
  close(stop_fd_);
}

void AddressWatcher::run() {
  pollfd fds[2] = {{netlink_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    // The messages are not parsed: any address of the host that came or went is
    // a reason to look again (getifaddrs, in the transport), which is cheap and
    // rare; the kernel says which address, but the transport decides what it serves.
    if (fds[0].revents != 0 && drain()) changed_();
  }
}

bool AddressWatcher::drain() {
  alignas(nlmsghdr) char buffer[8192];
  bool any = false;
  for (;;) {
    const ssize_t n = recv(netlink_fd_, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n < 0) {
      // ENOBUFS: the socket overran and messages were lost; look again anyway.
      if (errno == ENOBUFS) any = true;
      if (errno == EINTR || errno == ENOBUFS) continue;
      return any;
    }
    if (n == 0) return any;
    int left = int(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left))
      if (h->nlmsg_type == RTM_NEWADDR || h->nlmsg_type == RTM_DELADDR) any = true;
  }
}

}  // namespace softrdma::runtime
