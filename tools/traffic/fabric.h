// One process's software RNIC as the traffic engine uses it: a runtime::Node (the
// UDP transport on this process's own loopback address, DESIGN.md §6, optionally
// behind packet capture and fault injection, the Device and its progress thread),
// one PD and two CQs whose completions wake the application thread through an
// eventfd.
//
// The decorators stack as  FaultInjector( CaptureTransport( UdpTransport ) ):
// faults are injected on this process's transmit side (so when both processes
// inject, both directions of every QP see loss), and the capture sits closest to
// the socket, so the file shows what really went on the wire.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "engine/device.h"

namespace softrdma::runtime {
class Node;
}

namespace softrdma::traffic {

struct FabricOptions {
  std::string faults;  // fault_settings.h syntax ("loss=0.01,seed=3"); "" for none
  std::string pcap;    // capture file; "" for none
  uint32_t send_cqe = 1024;
  uint32_t recv_cqe = 1024;
};

class Fabric {
 public:
  static std::unique_ptr<Fabric> open(const FabricOptions& options, std::string& error);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  engine::Device& device();
  engine::Pd* pd() { return pd_; }
  engine::Cq& send_cq() { return *send_cq_; }
  engine::Cq& recv_cq() { return *recv_cq_; }
  // The GID peers reach this process at (index 1, the IPv4-mapped one).
  transport::Gid gid() const;
  std::string describe() const;

  // Readable after a completion arrived on an armed CQ.
  int notify_fd() const { return event_fd_; }
  void arm_notify();
  void drain_notify();

  // Engine, transport and fault-injection counters by name.
  std::map<std::string, uint64_t> counters() const;

 private:
  Fabric() = default;
  bool start(const FabricOptions& options, std::string& error);

  std::unique_ptr<runtime::Node> node_;
  engine::Pd* pd_ = nullptr;
  engine::Cq* send_cq_ = nullptr;
  engine::Cq* recv_cq_ = nullptr;
  int event_fd_ = -1;
};

}  // namespace softrdma::traffic
