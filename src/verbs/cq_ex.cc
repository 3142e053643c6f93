// Polling an extended CQ (ibv_create_cq_ex(3) "Polling an extended CQ"):
// ibv_start_poll / ibv_next_poll / ibv_end_poll and the ibv_wc_read_* accessors,
// which are inline in verbs.h and jump through the ibv_cq_ex's pointers.
//
// A batch takes completions out of the engine's CQ one at a time into the CQ's
// `current` slot (CqPollBatch), which the accessors read: a completion is taken
// once, so batches and ibv_poll_cq may be mixed on one CQ, and nothing refers to
// the engine's ring while the application reads (a resize or a QP's reset may
// move it meanwhile).
#include <sched.h>
#include <time.h>

#include <cerrno>

#include "verbs/objects.h"
#include "verbs/ops.h"
#include "verbs/process.h"

using namespace softrdma::verbs;
using softrdma::engine::Nanos;

namespace {

CqPollBatch& batch_of(ibv_cq_ex* ex) { return *to_cq(ex)->batch; }
const ibv_wc& current_wc(ibv_cq_ex* ex) { return batch_of(ex).current.wc; }

// The next completion into `current`, and its wr_id and status into the public
// struct, where the application reads them (ibv_create_cq_ex(3)).
bool take(Cq* cq) {
  CqPollBatch& batch = *cq->batch;
  if (!cq->engine_cq->pop(batch.current)) return false;
  cq->ex.wr_id = batch.current.wc.wr_id;
  cq->ex.status = batch.current.wc.status;
  return true;
}

// As op_poll_cq (cq.cc): an empty CQ makes progress on the caller's thread, and
// with SOFTRDMA_PROGRESS=inline every start of a batch does (`starting`).
bool take_with_progress(Cq* cq, bool starting) {
  bool got = take(cq);
  if (got && !(starting && cq->inline_progress)) return true;
  const bool worked = cq->node->progress_inline();
  if (!got) got = take(cq);
  // A completed RDMA WRITE hands the engine to the progress thread at once
  // (op_poll_cq's hands_over; docs/decisions/threading.md).
  if (got) cq->node->poller_satisfied(cq->batch->current.wc.opcode == IBV_WC_RDMA_WRITE);
  if (!got && !worked) after_idle_poll(cq->node->idle_poll_yields_at_once());  // (cq.cc)
  if (got) after_busy_poll();
  return got;
}

// ibv_start_poll: 0 with the first completion current, ENOENT when the CQ is
// empty (then the batch is not open and end_poll must not be called).
int start_poll(ibv_cq_ex* ex, ibv_poll_cq_attr* attr) {
  Cq* cq = to_cq(ex);
  // No attribute is defined yet: a bit set is one this library cannot honour (the
  // comp_mask rule of the extended verbs). A null attr is taken as empty.
  if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
  if (Process::get().stale(cq->ctx)) return EIO;
  CqPollBatch& batch = *cq->batch;
  if (!batch.single_threaded) batch.lock.lock();
  cq->engine_cq->begin_batch();
  if (!take_with_progress(cq, true)) {
    cq->engine_cq->end_batch();
    if (!batch.single_threaded) batch.lock.unlock();
    return ENOENT;
  }
  batch.open = true;
  return 0;
}

// ibv_next_poll: 0 with the next completion current, or ENOENT; either way the
// batch stays open until end_poll. It takes what is queued, as an RNIC
// provider's next_poll reads the CQ's memory; the progress thread brings the rest
// (docs/decisions/cq-ex.md). With SOFTRDMA_PROGRESS=inline there is no such thread,
// and an application that waits in next_poll (pyverbs' poll_cq_ex retries it on
// ENOENT) would wait forever: there an empty CQ makes progress, as start_poll does.
int next_poll(ibv_cq_ex* ex) {
  Cq* cq = to_cq(ex);
  if (!cq->batch->open) return EINVAL;
  const bool got = cq->inline_progress ? take_with_progress(cq, false) : take(cq);
  return got ? 0 : ENOENT;
}

// ibv_end_poll. Called after a failed start_poll by some applications (pyverbs'
// poll_cq_ex does, in a `finally`): then nothing is open and nothing is released.
void end_poll(ibv_cq_ex* ex) {
  CqPollBatch& batch = batch_of(ex);
  if (!batch.open) return;
  batch.open = false;
  to_cq(ex)->engine_cq->end_batch();
  if (!batch.single_threaded) batch.lock.unlock();
}

ibv_wc_opcode read_opcode(ibv_cq_ex* ex) { return current_wc(ex).opcode; }
uint32_t read_vendor_err(ibv_cq_ex* ex) { return current_wc(ex).vendor_err; }
unsigned int read_wc_flags(ibv_cq_ex* ex) { return current_wc(ex).wc_flags; }
uint32_t read_byte_len(ibv_cq_ex* ex) { return current_wc(ex).byte_len; }
// Also ibv_wc_read_invalidated_rkey (the same union of ibv_wc).
__be32 read_imm_data(ibv_cq_ex* ex) { return current_wc(ex).imm_data; }
uint32_t read_qp_num(ibv_cq_ex* ex) { return current_wc(ex).qp_num; }
uint32_t read_src_qp(ibv_cq_ex* ex) { return current_wc(ex).src_qp; }
uint32_t read_slid(ibv_cq_ex* ex) { return current_wc(ex).slid; }
uint8_t read_sl(ibv_cq_ex* ex) { return current_wc(ex).sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex* ex) { return current_wc(ex).dlid_path_bits; }

// ibv_wc_read_tm_info(3): the TMH's tag and app_ctx of a matched tag-matching
// receive (engine/qp_tm.cc); zeros for every other completion.
void read_tm_info(ibv_cq_ex* ex, ibv_wc_tm_info* tm_info) {
  const softrdma::engine::TmInfo& tm = batch_of(ex).current.tm;
  tm_info->tag = tm.tag;
  tm_info->priv = tm.priv;
}

// The device clock's time of the completion (engine::Device::complete), in the
// units of hca_core_clock: nanoseconds (attributes.cc).
uint64_t read_completion_ts(ibv_cq_ex* ex) {
  return uint64_t(batch_of(ex).current.timestamp);
}

Nanos clock_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return Nanos(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// ibv_create_cq_ex(3): the completion timestamp "converted from HCA clock units to
// wall clock nanoseconds". The device clock is CLOCK_MONOTONIC: the conversion is
// the present distance between the two clocks, as mlx5 converts with the clock's
// present parameters.
uint64_t read_completion_wallclock_ns(ibv_cq_ex* ex) {
  Cq* cq = to_cq(ex);
  const Nanos device_now = cq->ctx->device->clock().now();
  const Nanos wall_now = clock_ns(CLOCK_REALTIME);
  return uint64_t(cq->batch->current.timestamp + (wall_now - device_now));
}

}  // namespace

namespace softrdma::verbs {

// As rdma-core's providers fill theirs: the iterator, the accessors every
// completion has, and the accessor of each field asked for in wc_flags. A field
// not asked for has no accessor (NULL), as on RDMA NICs, so an application that
// forgot a flag fails here as it would on hardware. CVLAN and FLOW_TAG were
// refused at creation (cq.cc) and never have one.
void install_cq_ex_ops(ibv_cq_ex& ex, uint64_t wc_flags) {
  ex.start_poll = start_poll;
  ex.next_poll = next_poll;
  ex.end_poll = end_poll;
  ex.read_opcode = read_opcode;
  ex.read_vendor_err = read_vendor_err;
  ex.read_wc_flags = read_wc_flags;
  if (wc_flags & IBV_WC_EX_WITH_BYTE_LEN) ex.read_byte_len = read_byte_len;
  if (wc_flags & IBV_WC_EX_WITH_IMM) ex.read_imm_data = read_imm_data;
  if (wc_flags & IBV_WC_EX_WITH_QP_NUM) ex.read_qp_num = read_qp_num;
  if (wc_flags & IBV_WC_EX_WITH_SRC_QP) ex.read_src_qp = read_src_qp;
  if (wc_flags & IBV_WC_EX_WITH_SLID) ex.read_slid = read_slid;
  if (wc_flags & IBV_WC_EX_WITH_SL) ex.read_sl = read_sl;
  if (wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS) ex.read_dlid_path_bits = read_dlid_path_bits;
  if (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) ex.read_completion_ts = read_completion_ts;
  if (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
    ex.read_completion_wallclock_ns = read_completion_wallclock_ns;
  if (wc_flags & IBV_WC_EX_WITH_TM_INFO) ex.read_tm_info = read_tm_info;
}

}  // namespace softrdma::verbs
