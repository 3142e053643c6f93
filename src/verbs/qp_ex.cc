// The work-request builder API of extended QPs (ibv_wr_post(3)): ibv_wr_start,
// one builder per WR followed by its setters, then ibv_wr_complete posts the
// batch through the same engine path as ibv_post_send (or ibv_wr_abort drops it).
// Builders record errors instead of failing (they return void); ibv_wr_complete
// reports the first one and then posts nothing.
#include <cstring>

#include "verbs/objects.h"
#include "verbs/ops.h"
#include "verbs/process.h"

using namespace softrdma::verbs;

namespace {

WrBatch& batch_of(ibv_qp_ex* qpx) { return *to_qp(qpx)->batch; }

// Starts a WR from the QP's wr_id and wr_flags, as the builders do.
ibv_send_wr& add_wr(ibv_qp_ex* qpx, ibv_wr_opcode opcode) {
  WrBatch& b = batch_of(qpx);
  if (b.used == b.entries.size()) b.entries.emplace_back();
  WrBatch::Entry& e = b.entries[b.used++];
  e.wr = ibv_send_wr{};
  e.sges.clear();
  e.inline_data.clear();
  e.wr.wr_id = qpx->wr_id;
  e.wr.send_flags = qpx->wr_flags;
  e.wr.opcode = opcode;
  return e.wr;
}

// The WR the setters apply to; null (and an error for ibv_wr_complete) when a
// setter comes before any builder.
WrBatch::Entry* current(ibv_qp_ex* qpx) {
  WrBatch& b = batch_of(qpx);
  if (b.used == 0) {
    if (b.error == 0) b.error = EINVAL;
    return nullptr;
  }
  return &b.entries[b.used - 1];
}

void set_error(ibv_qp_ex* qpx, int err) {
  WrBatch& b = batch_of(qpx);
  if (b.error == 0) b.error = err;
}

void unsupported(ibv_qp_ex* qpx) { set_error(qpx, EOPNOTSUPP); }

// The builders and setters are called from C: an allocation failure becomes
// the batch's error instead of an exception crossing their frames.
template <typename Fn>
void guarded(ibv_qp_ex* qpx, Fn&& fn) noexcept {
  try {
    fn();
  } catch (...) {
    set_error(qpx, ENOMEM);
  }
}

void reset(WrBatch& b) {
  b.used = 0;
  b.error = 0;
}

void wr_start(ibv_qp_ex* qpx) {
  WrBatch& b = batch_of(qpx);
  b.lock.lock();
  b.open = true;
  reset(b);
}

// Ends a batch: drops what was built and lets the next thread start one.
void close_batch(WrBatch& b) {
  reset(b);
  b.open = false;
  b.lock.unlock();
}

void wr_abort(ibv_qp_ex* qpx) {
  WrBatch& b = batch_of(qpx);
  if (b.open) close_batch(b);
}

// ibv_wr_complete(3): nothing is posted when a builder failed. The engine posts
// a prefix of the batch when it runs out of queue space mid-batch (ENOMEM), as
// ibv_post_send does. The batch is linked here, once its storage is final.
int wr_complete(ibv_qp_ex* qpx) {
  WrBatch& b = batch_of(qpx);
  if (!b.open) return EINVAL;  // no ibv_wr_start before
  int err = b.error;
  if (err == 0 && b.used > 0) {
    for (size_t i = 0; i < b.used; ++i) {
      WrBatch::Entry& e = b.entries[i];
      e.wr.sg_list = e.sges.data();
      e.wr.num_sge = int(e.sges.size());
      e.wr.next = i + 1 < b.used ? &b.entries[i + 1].wr : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    err = op_post_send(&qpx->qp_base, &b.entries[0].wr, &bad);
  }
  close_batch(b);
  return err;
}

void wr_send(ibv_qp_ex* qpx) {
  guarded(qpx, [&] { add_wr(qpx, IBV_WR_SEND); });
}

void wr_send_imm(ibv_qp_ex* qpx, __be32 imm) {
  guarded(qpx, [&] { add_wr(qpx, IBV_WR_SEND_WITH_IMM).imm_data = imm; });
}

void wr_rdma_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  guarded(qpx, [&] {
    ibv_send_wr& wr = add_wr(qpx, IBV_WR_RDMA_WRITE);
    wr.wr.rdma = {remote_addr, rkey};
  });
}

void wr_rdma_write_imm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, __be32 imm) {
  guarded(qpx, [&] {
    ibv_send_wr& wr = add_wr(qpx, IBV_WR_RDMA_WRITE_WITH_IMM);
    wr.wr.rdma = {remote_addr, rkey};
    wr.imm_data = imm;
  });
}

void wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  guarded(qpx, [&] {
    ibv_send_wr& wr = add_wr(qpx, IBV_WR_RDMA_READ);
    wr.wr.rdma = {remote_addr, rkey};
  });
}

void wr_atomic_cmp_swp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                       uint64_t swap) {
  guarded(qpx, [&] {
    ibv_send_wr& wr = add_wr(qpx, IBV_WR_ATOMIC_CMP_AND_SWP);
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.compare_add = compare;
    wr.wr.atomic.swap = swap;
  });
}

void wr_atomic_fetch_add(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
  guarded(qpx, [&] {
    ibv_send_wr& wr = add_wr(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD);
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.compare_add = add;
  });
}

void wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  guarded(qpx, [&] {
    if (WrBatch::Entry* e = current(qpx)) e->sges.assign(1, ibv_sge{addr, length, lkey});
  });
}

void wr_set_sge_list(ibv_qp_ex* qpx, size_t num_sge, const ibv_sge* sg_list) {
  guarded(qpx, [&] {
    if (WrBatch::Entry* e = current(qpx)) e->sges.assign(sg_list, sg_list + num_sge);
  });
}

// Inline data is copied now (ibv_wr_post(3): the buffers may be reused as soon
// as the setter returns); the engine copies it again at post time.
void set_inline(WrBatch::Entry& e) {
  e.wr.send_flags |= IBV_SEND_INLINE;
  e.sges.assign(1, ibv_sge{uintptr_t(e.inline_data.data()), uint32_t(e.inline_data.size()), 0});
}

void wr_set_inline_data(ibv_qp_ex* qpx, void* addr, size_t length) {
  guarded(qpx, [&] {
    WrBatch::Entry* e = current(qpx);
    if (e == nullptr) return;
    const auto* bytes = static_cast<const uint8_t*>(addr);
    e->inline_data.assign(bytes, bytes + length);
    set_inline(*e);
  });
}

void wr_set_inline_data_list(ibv_qp_ex* qpx, size_t num_buf, const ibv_data_buf* list) {
  guarded(qpx, [&] {
    WrBatch::Entry* e = current(qpx);
    if (e == nullptr) return;
    e->inline_data.clear();
    for (size_t i = 0; i < num_buf; ++i) {
      const auto* bytes = static_cast<const uint8_t*>(list[i].addr);
      e->inline_data.insert(e->inline_data.end(), bytes, bytes + list[i].length);
    }
    set_inline(*e);
  });
}

// ibv_wr_atomic_write(3): the 8 bytes at `atomic_wr` are read now (IBA 1.5 9.4.6).
void wr_atomic_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, const void* atomic_wr) {
  guarded(qpx, [&] {
    ibv_send_wr& wr = add_wr(qpx, IBV_WR_ATOMIC_WRITE);
    wr.wr.rdma = {remote_addr, rkey};
    WrBatch::Entry& e = *current(qpx);
    const auto* bytes = static_cast<const uint8_t*>(atomic_wr);
    e.inline_data.assign(bytes, bytes + 8);
    e.sges.assign(1, ibv_sge{uintptr_t(e.inline_data.data()), 8, 0});
  });
}

// ibv_wr_set_ud_addr(3): where a UD WR goes (the AH is read when it is posted).
void wr_set_ud_addr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  WrBatch::Entry* e = current(qpx);
  if (e == nullptr) return;
  e->wr.wr.ud.ah = ah;
  e->wr.wr.ud.remote_qpn = remote_qpn;
  e->wr.wr.ud.remote_qkey = remote_qkey;
}

// ibv_wr_set_xrc_srqn(3): the remote XRC SRQ an XRC send QP's WR is for.
void wr_set_xrc_srqn(ibv_qp_ex* qpx, uint32_t remote_srqn) {
  WrBatch::Entry* e = current(qpx);
  if (e == nullptr) return;
  e->wr.qp_type.xrc.remote_srqn = remote_srqn;
}

// ibv_wr_bind_mw: a type 2 window (a type 1 one is bound by ibv_bind_mw(3) only,
// which the engine checks when the batch is posted).
void wr_bind_mw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  guarded(qpx, [&] {
    ibv_send_wr& wr = add_wr(qpx, IBV_WR_BIND_MW);
    if (mw == nullptr || info == nullptr) return set_error(qpx, EINVAL);
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info = *info;
  });
}

void wr_local_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  guarded(qpx, [&] { add_wr(qpx, IBV_WR_LOCAL_INV).invalidate_rkey = invalidate_rkey; });
}

void wr_send_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  guarded(qpx, [&] { add_wr(qpx, IBV_WR_SEND_WITH_INV).invalidate_rkey = invalidate_rkey; });
}

// Builders of services not offered here: the batch fails.
void wr_send_tso(ibv_qp_ex* qpx, void*, uint16_t, uint16_t) { unsupported(qpx); }

}  // namespace

namespace softrdma::verbs {

void install_wr_ops(ibv_qp_ex& q) {
  q.wr_start = wr_start;
  q.wr_complete = wr_complete;
  q.wr_abort = wr_abort;
  q.wr_send = wr_send;
  q.wr_send_imm = wr_send_imm;
  q.wr_rdma_write = wr_rdma_write;
  q.wr_rdma_write_imm = wr_rdma_write_imm;
  q.wr_rdma_read = wr_rdma_read;
  q.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  q.wr_atomic_fetch_add = wr_atomic_fetch_add;
  q.wr_set_sge = wr_set_sge;
  q.wr_set_sge_list = wr_set_sge_list;
  q.wr_set_inline_data = wr_set_inline_data;
  q.wr_set_inline_data_list = wr_set_inline_data_list;
  q.wr_bind_mw = wr_bind_mw;
  q.wr_local_inv = wr_local_inv;
  q.wr_send_inv = wr_send_inv;
  q.wr_send_tso = wr_send_tso;
  q.wr_set_ud_addr = wr_set_ud_addr;
  q.wr_set_xrc_srqn = wr_set_xrc_srqn;
  q.wr_atomic_write = wr_atomic_write;
}

}  // namespace softrdma::verbs
