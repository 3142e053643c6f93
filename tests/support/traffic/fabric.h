// One process's verbs device as the traffic tool uses it: the first device of
// ibv_get_device_list (softrdma's, when the program runs on the drop-in library:
// `softrdma run`), one PD, a completion channel and two CQs on it (IBA 11.4.2.2:
// the CQ event handler; ibv_req_notify_cq(3), ibv_get_cq_event(3)), and for the
// SRQ lane one shared receive queue (ibv_create_srq(3)).
//
// Nothing here knows softrdma: faults and capture are the library's own settings
// (SOFTRDMA_FAULTS, SOFTRDMA_PCAP in the environment, docs/configuration.md).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace softrdma::traffic {

using Gid = std::array<uint8_t, 16>;

struct FabricOptions {
  uint32_t send_cqe = 1024;
  uint32_t recv_cqe = 1024;
  uint32_t srq_wr = 0;  // 0: no SRQ
  uint32_t srq_sge = 1;
};

class Fabric {
 public:
  static std::unique_ptr<Fabric> open(const FabricOptions& options, std::string& error);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  ibv_cq* send_cq() const { return send_cq_; }
  ibv_cq* recv_cq() const { return recv_cq_; }
  ibv_srq* srq() const { return srq_; }
  const ibv_port_attr& port() const { return port_; }
  // The GID peers reach this process at: index 1 (the IPv4-mapped one) when the
  // port has it, else 0.
  const Gid& gid() const { return gid_; }
  uint8_t gid_index() const { return gid_index_; }
  std::string describe() const;

  // Readable after a completion arrived on an armed CQ (the channel's fd).
  int notify_fd() const { return channel_->fd; }
  // Requests the next completion event on both CQs. False: the request failed.
  bool arm_notify();
  // Takes (and acknowledges) the events that arrived; non-blocking.
  void drain_notify();

 private:
  Fabric() = default;
  bool start(const FabricOptions& options, std::string& error);

  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_srq* srq_ = nullptr;
  ibv_port_attr port_{};
  Gid gid_{};
  uint8_t gid_index_ = 0;
  std::string device_name_;
};

}  // namespace softrdma::traffic
