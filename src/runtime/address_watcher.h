// Watches the host's addresses (rtnetlink RTM_NEWADDR/RTM_DELADDR) for a device
// whose GID table follows them (docs/decisions/gid-table.md, "Addresses that
// come and go"): one thread, blocked in poll(2) on a netlink socket, that calls
// back after each batch of address messages. Not on the progress path: the
// engine's loop pays nothing for it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace softrdma::runtime {

class AddressWatcher {
 public:
  // Null (and the reason in `error`) when the netlink socket cannot be opened.
  static std::unique_ptr<AddressWatcher> start(std::function<void()> changed, std::string& error);
  ~AddressWatcher();  // stops and joins the thread
  AddressWatcher(const AddressWatcher&) = delete;
  AddressWatcher& operator=(const AddressWatcher&) = delete;

 private:
  AddressWatcher(int netlink_fd, int stop_fd, std::function<void()> changed);
  void run();
  bool drain();  // true when an address message (or an overrun) was read

  const int netlink_fd_;
  const int stop_fd_;  // an eventfd: the destructor's "stop"
  std::function<void()> changed_;
  std::thread thread_;
};

}  // namespace softrdma::runtime
