// Tag-matching SRQs (IBV_SRQT_TM): the list operations of ibv_post_srq_ops(3) and
// the matching of an arriving message (rdma-core Documentation/tag_matching.md);
// docs/decisions/tag-matching.md.
#include <cerrno>

#include "engine/cq.h"
#include "engine/device.h"
#include "engine/qp.h"
#include "engine/srq.h"

namespace softrdma::engine {

// ibv_post_srq_ops(3). As mlx5 answers: EINVAL on an SRQ without a tag list or
// for an unknown opcode, ENOMEM when the list is full or the post carries more
// operations than max_ops; *bad names the operation refused, and those before it
// were done.
int Srq::post_ops(ibv_ops_wr* wr, ibv_ops_wr** bad) {
  int err = 0;
  if (tags_ == nullptr) {
    err = EINVAL;
  } else {
    auto engine = device_.hold_engine();
    for (uint32_t n = 0; wr != nullptr; wr = wr->next, ++n) {
      err = n >= max_ops_ ? ENOMEM : run_op(*wr);
      if (err != 0) break;
    }
  }
  if (err != 0 && bad != nullptr) *bad = wr;
  return err;
}

// One operation, checked whole before anything changes. IBV_OPS_TM_SYNC reports
// the unexpected messages software has handled before the operation itself is
// done, so an entry added with it is added in sync (mlx5 applies it so too).
// Completions: signaled ones and every failure, on the SRQ's CQ, with
// IBV_WC_TM_SYNC_REQ while hardware counts unexpected messages software has not
// reported (tag_matching.md "all completions indicate when synchronization is
// necessary").
int Srq::run_op(ibv_ops_wr& wr) {
  constexpr int kKnownFlags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC;
  if (wr.flags & ~kKnownFlags) return EINVAL;
  const int opcode = raw_enum(wr.opcode);
  ibv_wc wc{};
  wc.wr_id = wr.wr_id;
  wc.status = IBV_WC_SUCCESS;
  switch (opcode) {
    case IBV_WR_TAG_ADD: {
      const int num_sge = wr.tm.add.num_sge;
      if (num_sge < 0 || uint32_t(num_sge) > device_.limits().max_tm_sge) return EINVAL;
      if (wr.flags & IBV_OPS_TM_SYNC) tags_->sync(wr.tm.unexpected_cnt);
      uint32_t handle = 0;
      if (int err = tags_->add(wr, handle)) return err;
      wr.tm.handle = handle;  // ibv_post_srq_ops(3): "output parameter for the ADD opcode"
      wc.opcode = IBV_WC_TM_ADD;
      break;
    }
    case IBV_WR_TAG_DEL:
      if (wr.tm.handle >= tags_->capacity()) return EINVAL;  // never a handle
      if (wr.flags & IBV_OPS_TM_SYNC) tags_->sync(wr.tm.unexpected_cnt);
      wc.opcode = IBV_WC_TM_DEL;
      // ibv_post_srq_ops(3): "may fail due to concurrent tag consumption".
      if (!tags_->del(wr.tm.handle)) wc.status = IBV_WC_TM_ERR;
      break;
    case IBV_WR_TAG_SYNC:
      if (wr.flags & IBV_OPS_TM_SYNC) tags_->sync(wr.tm.unexpected_cnt);
      wc.opcode = IBV_WC_TM_SYNC;
      break;
    default:
      return EINVAL;
  }
  if (!tags_->in_sync()) wc.wc_flags |= IBV_WC_TM_SYNC_REQ;
  if ((wr.flags & IBV_OPS_SIGNALED) || wc.status != IBV_WC_SUCCESS)
    device_.complete(*cq_, wc, false);
  return 0;
}

// tag_matching.md: EAGER and RNDV messages are matched against the armed tags in
// the order they were added; a match takes the tagged buffer. Everything else —
// no armed tag matched, a FIN, an unknown opcode, a message shorter than a TMH —
// is unexpected: the whole message, headers included, goes to an ordinary WQE and
// hardware counts it. NO_TAG also goes to an ordinary WQE, but is not unexpected.
bool Srq::take_tm(std::span<const uint8_t> start, bool may_rendezvous, HeldRecv& into,
                  TmMessage& msg) {
  TmHeader header;
  const bool has_tmh = parse_tm_header(start, header);
  const bool eager = has_tmh && header.opcode == IBV_TMH_EAGER;
  const bool rendezvous = has_tmh && header.opcode == IBV_TMH_RNDV && header.has_rvh;
  if (eager || rendezvous) {
    if (std::optional<uint32_t> handle = tags_->match(header.tag)) {
      if (rendezvous && !may_rendezvous) return false;
      TagEntry entry = tags_->take(*handle);
      into.sges = std::move(entry.sges);
      into.wqe = RecvWqe{};
      into.wqe.wr_id = entry.recv_wr_id;
      into.wqe.sgl = SgeList{into.sges.data(), uint32_t(into.sges.size())};
      into.wqe.length = entry.length;
      into.held = true;
      msg = TmMessage{rendezvous ? TmKind::kRendezvous : TmKind::kEager, header, false};
      return true;
    }
  }
  if (!take(into)) return false;
  const bool no_tag = has_tmh && header.opcode == IBV_TMH_NO_TAG;
  if (!no_tag) tags_->count_unexpected();
  msg = TmMessage{no_tag ? TmKind::kNoTag : TmKind::kUnexpected, header, false};
  return true;
}

}  // namespace softrdma::engine
