// One softrdma device as a process opens it: the UDP transport (with fault
// injection and capture when the settings ask), the engine, and the progress loop.
// The verbs library and the tools open devices through here only.
#pragma once

#include <memory>
#include <string>

#include "engine/device.h"
#include "progress/loop.h"
#include "runtime/settings.h"
#include "runtime/status_segment.h"
#include "transport/transport.h"

namespace softrdma::transport {
class FaultInjector;
}

namespace softrdma::runtime {

class Node {
 public:
  // Opens the device. On failure returns null and says why (and what to do).
  static std::unique_ptr<Node> open(const Settings& settings, std::string& error);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  engine::Device& device() { return *device_; }
  transport::Transport& transport() { return *transport_; }
  const Settings& settings() const { return settings_; }
  // Progress on the caller's thread (poll_cq with SOFTRDMA_PROGRESS=inline, or to
  // cut latency); false when there was nothing to do or another thread was at it.
  bool progress_inline();
  // The inline poller got completions (it may stop polling): the loop takes over.
  void poller_satisfied(bool hand_over) {
    if (loop_) loop_->poller_satisfied(hand_over);
  }
  progress::ProgressLoop* loop() { return loop_.get(); }
  // The fault injector on top of the transport, when SOFTRDMA_FAULTS asked for one.
  transport::FaultInjector* faults() { return faults_; }
  // The process's status segment for this device; null when none could be made.
  const StatusSegment* status() const { return status_.get(); }

 private:
  explicit Node(const Settings& settings) : settings_(settings) {}

  Settings settings_;
  std::unique_ptr<StatusSegment> status_;  // outlives the device: its counters live there
  std::unique_ptr<transport::Transport> transport_;
  transport::FaultInjector* faults_ = nullptr;  // inside transport_, when configured
  std::unique_ptr<engine::Device> device_;
  std::unique_ptr<progress::ProgressLoop> loop_;
};

}  // namespace softrdma::runtime
