// Helpers for the unit tests of softrdma's libibverbs.so.1, which they use the
// way applications do: through <infiniband/verbs.h> only, linked against the
// built library (never the engine's C++ API).
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace softrdma::verbs::testing {

// The first (and only) device, opened; closed at destruction.
class Device {
 public:
  Device();
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ibv_context* ctx() const { return ctx_; }
  ibv_device* device() const { return device_; }

 private:
  ibv_device** list_ = nullptr;
  ibv_device* device_ = nullptr;
  ibv_context* ctx_ = nullptr;
};

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// One end of an RC connection: PD, CQ (send and receive), QP and a registered
// buffer.
struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* channel = nullptr;  // the CQ's, when PairOptions::with_channel
  ibv_cq* cq = nullptr;
  ibv_cq_ex* cqx = nullptr;  // the same CQ, when PairOptions::extended_cq
  ibv_qp* qp = nullptr;
  std::vector<uint8_t> buf;
  ibv_mr* mr = nullptr;

  uint64_t addr(size_t offset = 0) { return uint64_t(uintptr_t(buf.data() + offset)); }
};

struct PairOptions {
  bool two_contexts = false;  // each side on its own ibv_context
  bool extended_qp = false;   // created with ibv_create_qp_ex + send_ops_flags
  bool with_channel = false;  // each CQ reports to a completion channel of its own
  // Each side's CQ made by ibv_create_cq_ex with these wc_flags, and cq_flags
  // (under IBV_CQ_INIT_ATTR_MASK_FLAGS) when not 0.
  bool extended_cq = false;
  uint64_t cq_wc_flags = 0;
  uint32_t cq_flags = 0;
  int cqe = 64;
  uint32_t max_send_wr = 16;
  uint32_t max_recv_wr = 16;
  uint32_t max_sge = 4;
  size_t buffer = 64 * 1024;
  uint8_t sgid_index = 1;
};

// Two RC QPs connected to each other through the softrdma device (UDP over the
// process's loopback address), in RTS.
class Pair {
 public:
  explicit Pair(const PairOptions& options = {});
  ~Pair();
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  Side a, b;

  // Moves a QP through INIT and RTR to RTS (or only to `until`) towards `remote`.
  static void connect(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& remote_gid,
                      uint8_t sgid_index, ibv_qp_state until = IBV_QPS_RTS);

 private:
  void build(const PairOptions& options);
  void make_side(Side& side, ibv_context* ctx, const PairOptions& options);
  std::unique_ptr<Device> dev_a_, dev_b_;
};

// Polls until `n` completions arrived (a liveness guard of many seconds stops a
// hang; it is not a timing assertion). Returns what arrived.
std::vector<ibv_wc> poll_n(ibv_cq* cq, int n);

// Posts one work request of one SGE.
int post_send(ibv_qp* qp, ibv_wr_opcode opcode, ibv_sge sge, uint64_t wr_id,
              uint64_t remote_addr = 0, uint32_t rkey = 0);
int post_recv(ibv_qp* qp, ibv_sge sge, uint64_t wr_id);

}  // namespace softrdma::verbs::testing
