// Helpers of the extended-CQ tests (cq_ex_test.cc, cq_ex_errors_test.cc): reading
// completions through ibv_start_poll / ibv_next_poll / ibv_end_poll and the
// ibv_wc_read_* accessors, the device clock, and a QP in Error whose posts complete
// (flushed) in a known order.
#pragma once

#include <infiniband/verbs.h>
#include <time.h>

#include <cstdint>
#include <vector>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {

// Everything an extended CQ says of one completion; fields whose accessor the CQ
// lacks (not asked for in wc_flags) stay 0.
struct ExWc {
  uint64_t wr_id = 0;
  ibv_wc_status status = IBV_WC_SUCCESS;
  ibv_wc_opcode opcode = IBV_WC_SEND;
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  __be32 imm_data = 0;
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  unsigned wc_flags = 0;
  uint32_t slid = 0;
  uint8_t sl = 0;
  uint8_t dlid_path_bits = 0;
  uint64_t timestamp = 0;
};

// The current completion of an open batch.
ExWc read_current(ibv_cq_ex* cq);
// ibv_start_poll until a completion comes (a liveness guard of many seconds stops
// a hang; it is not a timing assertion). True with a batch open.
bool start_batch(ibv_cq_ex* cq);
// Takes `n` completions in batches, waiting for them (same guard).
std::vector<ExWc> take_ex(ibv_cq_ex* cq, int n);
// Takes what the CQ holds now, in one batch.
std::vector<ExWc> drain_ex(ibv_cq_ex* cq);

// The device clock, by ibv_query_rt_values_ex(3), in its units (ns).
uint64_t device_clock(ibv_context* ctx);
int64_t clock_ns(clockid_t id);

// A QP moved straight to Error (ibv_modify_qp(3): any state may go to Error), its
// send CQ made by ibv_create_cq_ex, its receive CQ an ordinary one. Every send
// posted completes with IBV_WC_WR_FLUSH_ERR (IBA 10.3.1).
class FlushingQp {
 public:
  FlushingQp(int cqe, uint64_t wc_flags, uint32_t max_send_wr = 16, uint32_t cq_flags = 0);
  ~FlushingQp();
  FlushingQp(const FlushingQp&) = delete;
  FlushingQp& operator=(const FlushingQp&) = delete;

  bool ready() const { return qp_ != nullptr; }
  ibv_context* ctx() const { return dev_.ctx(); }
  // Posts `n` sends (wr_id 0..n-1) and returns once all are flushed into `cqx`: a
  // receive posted after them is flushed after them (the send queue is flushed
  // first), and its completion is awaited on the receive CQ.
  void flush_sends(int n);

  ibv_cq_ex* cqx = nullptr;

 private:
  Device dev_;
  ibv_pd* pd_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
};

}  // namespace softrdma::verbs::testing
