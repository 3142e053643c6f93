// A RoCEv2 device on an address the host's other processes share (issue 27,
// docs/decisions/host-rnic.md): this process's slot in the address's registry,
// its hand-over, the transport's hooks, its QPN blocks, and the group's steering
// program kept current as members come, learn their indices and go.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "samehost/host_registry.h"
#include "transport/udp/handover.h"
#include "transport/udp/udp_transport.h"

namespace softrdma::runtime {

class SharedAddress {
 public:
  // Joins `address`'s registry and opens this process's hand-over. Null and why.
  // `crossed`: each member's QPN blocks are steered to another member's socket, so
  // that every packet is handed over (SOFTRDMA_SHARE_ADDRESS=crossed, to measure it).
  static std::unique_ptr<SharedAddress> join(const wire::Gid& address, std::string& error,
                                             bool crossed = false);

  // What the UDP transport is given (UdpConfig::shared); it must outlive it.
  const transport::SharedAddress& hooks() const { return hooks_; }
  // The transport is open: its first block, the program, a round of probes.
  void start(transport::UdpTransport& transport);
  // DeviceConfig::take_qpn_block: the first slot, then further ones.
  uint32_t take_qpn_block();
  // After each engine turn: one load unless the registry changed, or a second
  // passed (dead members are looked for then).
  void after_turn();
  uint32_t slot() const { return registry_->slot(); }
  // The live process holding `slot`, 0 when none.
  pid_t slot_owner(uint32_t slot) const { return registry_->owner(slot).value_or(0); }
  // In a child of fork() (verbs/process.cc): closes its copy of the hand-over socket.
  void close_after_fork() {
    if (handover_) handover_->close_after_fork();
  }
  // CM listeners (docs/decisions/host-rnic.md, "CM MADs"): REQs and SIDR_REQs for
  // `service_id` are handed to this process from whichever member receives them.
  // EADDRINUSE when another process listens there, or the table is full.
  int claim_service(uint64_t service_id);
  void release_service(uint64_t service_id);

 private:
  SharedAddress() = default;
  void probe();
  void steer();

  std::unique_ptr<samehost::HostRegistry> registry_;
  std::unique_ptr<transport::udp::Handover> handover_;
  transport::SharedAddress hooks_;
  transport::UdpTransport* transport_ = nullptr;
  bool first_block_given_ = false;
  bool crossed_ = false;
  std::atomic<bool> learned_{false};  // a probe told this socket its index
  // after_turn runs after each turn of any thread (the loop's, a poller's), outside
  // the engine's lock: one at a time, the others skip (the next turn looks again).
  std::mutex after_turn_mutex_;
  std::atomic<uint64_t> seen_generation_{0};  // read outside the mutex by after_turn
  std::set<pid_t> seen_members_;
  std::atomic<int64_t> next_reap_ms_{0};
};

}  // namespace softrdma::runtime
