// One softrdma device as a process opens it: the UDP transport (with fault
// injection and capture when the settings ask), the engine, and the progress loop.
// The verbs library and the tools open devices through here only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/device.h"
#include "runtime/address_watcher.h"
#include "progress/loop.h"
#include "runtime/settings.h"
#include "runtime/shared_address.h"
#include "runtime/status_segment.h"
#include "samehost/host.h"
#include "transport/stream.h"
#include "transport/transport.h"

namespace softrdma::transport {
class FaultInjector;
class UdpTransport;
}

namespace softrdma::runtime {

class OpenDevice {
 public:
  // Opens the device. On failure returns null and says why (and what to do).
  static std::unique_ptr<OpenDevice> open(const Settings& settings, std::string& error);
  ~OpenDevice();
  OpenDevice(const OpenDevice&) = delete;
  OpenDevice& operator=(const OpenDevice&) = delete;

  engine::Device& device() { return *device_; }
  transport::Transport& transport() { return *transport_; }
  // As opened: `address` is the one the device serves (the host's when
  // SOFTRDMA_ADDR was not set; address_is_default says so).
  const Settings& settings() const { return settings_; }
  // Progress on the caller's thread (poll_cq with SOFTRDMA_PROGRESS=inline, or to
  // cut latency); false when there was nothing to do or another thread was at it.
  bool progress_inline();
  // Nothing came by the wire lately (engine::Device::wire_quiet).
  bool wire_quiet() const { return device_->wire_quiet(device_->clock().now()); }
  // Whether a poll that found nothing gives the core away at once (verbs/cq.cc
  // after_idle_poll): while the wire carries traffic (this process's progress
  // thread may have to run); never when the poller reads the wire itself while
  // the loop stands aside (iWARP's streams: docs/decisions/iwarp.md).
  bool idle_poll_yields_at_once() const {
    return !device_->family().traits().poller_reads_wire && !wire_quiet();
  }
  // The inline poller got completions (it may stop polling): the loop takes over.
  void poller_satisfied(bool hand_over) {
    if (loop_) loop_->poller_satisfied(hand_over);
  }
  progress::ProgressLoop* loop() { return loop_.get(); }
  // In a child of fork(), which forgets the parent's device without destroying it:
  // closes the child's copies of the sockets that name the parent on its address
  // (the UDP receive sockets, the hand-over), so that a child outliving its parent
  // neither holds a place in the address's SO_REUSEPORT group that nobody reads
  // (packets the kernel hashes to it would be lost) nor keeps a hand-over name a
  // newcomer must bind (docs/decisions/host-rnic.md, "Fork").
  void close_after_fork();
  // Set when the address is shared with other processes of the host
  // (SOFTRDMA_SHARE_ADDRESS; docs/decisions/host-rnic.md).
  SharedAddress* shared_address() { return shared_.get(); }
  // The fault injector on top of the transport, when SOFTRDMA_FAULTS asked for one.
  transport::FaultInjector* faults() { return faults_; }
  // The process's status segment for this device; null when none could be made.
  const StatusSegment* status() const { return status_.get(); }
  // Segments (status and node) of this user's processes that ended without
  // removing them — killed — which opening this device removed: `softrdma
  // status`, which opens one first, counts them with what its reader removes.
  int stale_segments_removed() const { return stale_removed_; }
  // Told the number of each RC QP that entered Error (a connection that failed —
  // retries exhausted, a fatal error — or an ibv_modify_qp to Error), after the
  // engine's turn, with no engine lock held: softrdma's librdmacm ends the rdma_cm
  // connection of such a QP (docs/decisions/rdma-cm.md, "A peer that dies").
  // Set once, before QPs exist.
  void set_qp_error_listener(std::function<void(uint32_t qpn)> listener) {
    qp_error_listener_ = std::move(listener);
  }

 private:
  explicit OpenDevice(const Settings& settings) : settings_(settings) {}
  // The engine's QP observer: the status segment's row, and QPs entering Error.
  engine::QpCounters* observe_qp(const engine::Qp& qp, bool gone);
  // One turn of the engine, then the QPs that entered Error meanwhile are told.
  bool turn(engine::Device::Turner who);
  // What follows every turn, with the engine released: reports of QPs that
  // entered Error to the listener.
  void after_turn();
  void report_qp_errors();
  // At close, on a shared address: what the socket holds for other processes goes
  // to them before the socket closes.
  void hand_over_what_is_queued();
  void watch_addresses();
  // The same-host path (docs/decisions/same-host.md), unless the settings put
  // everything on the wire or no node segment could be made (said once).
  void open_same_host();
  // The transport, on the address the settings name or the host's (joining its
  // group when shared); false and why.
  bool open_wire(std::string& error);
  // `address_refused`: the failure was the address's (another user's group, its
  // port held), which open_wire answers with a loopback address of this process's.
  bool open_wire_on_address(std::string& error, bool& address_refused);
  bool join_shared_address(std::string& error);

  Settings settings_;
  std::unique_ptr<StatusSegment> status_;  // outlives the device: its counters live there
  std::unique_ptr<SharedAddress> shared_;  // set: the address is shared (host-rnic.md)
  std::unique_ptr<transport::Transport> transport_;
  transport::UdpTransport* udp_ = nullptr;  // inside transport_, for RoCEv2
  transport::FaultInjector* faults_ = nullptr;  // inside transport_, when configured
  std::unique_ptr<samehost::Host> host_;  // outlives the device, which publishes there
  int stale_removed_ = 0;
  std::unique_ptr<transport::StreamTransport> streams_;  // SOFTRDMA_WIRE=iwarp
  std::unique_ptr<engine::Device> device_;
  std::unique_ptr<progress::ProgressLoop> loop_;
  // For a device whose GID table follows the host's addresses (an IPv4
  // SOFTRDMA_ADDR off loopback); stopped before the device closes.
  std::unique_ptr<AddressWatcher> address_watcher_;

  // QPs that entered Error, noted under the QP's lock by observe_qp and told by
  // turn() once no lock is held (DESIGN.md §5: no system call under a QP lock).
  std::function<void(uint32_t)> qp_error_listener_;
  std::mutex qp_errors_mutex_;  // leaf
  std::vector<uint32_t> qp_errors_;
  std::atomic<bool> qp_errors_pending_{false};
};

}  // namespace softrdma::runtime
