// The rounds of a lane on an unreliable transport (UC, UD; lane.h): after each
// round the lane drains, then posts a marker until the peer confirms it out of
// band. Only then are the round's one-sided ranges checked, since a UC RDMA WRITE
// that completed at the requester may still be on its way.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "traffic/lane.h"

namespace softrdma::traffic {

namespace {

// The marker is repeated at this interval, doubling up to the maximum: it may be
// lost, and CI machines are slow (no deadline assumes delivery).
constexpr int64_t kMarkerRetryFirstNs = 100'000'000;
constexpr int64_t kMarkerRetryMaxNs = 1'600'000'000;

}  // namespace

bool Lane::ends_round(const Message& m, uint32_t round_consumed) const {
  return is_unreliable(setup_.transport) && op_info(m.op).consumes_recv &&
         round_consumed >= round_budget_;
}

void Lane::after_drain() {
  if (plan_.empty()) {
    state_ = State::kDone;
    return;
  }
  state_ = State::kMarking;
  markers_this_round_ = 0;
  next_marker_ns_ = 0;  // at once
}

bool Lane::post_marker(int64_t now) {
  if (now < next_marker_ns_) return false;
  ibv_send_wr wr{};
  wr.wr_id = kMarkerWrId | markers_this_round_;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  const MarkerTag tag{phase_, round_, consumed_posted_};
  wr.imm_data = htonl(tag.imm());
  if (setup_.transport == Transport::kUd) {
    wr.wr.ud.ah = setup_.ah;
    wr.wr.ud.remote_qpn = setup_.remote_qpn;
    wr.wr.ud.remote_qkey = setup_.remote_qkey;
  }
  ibv_send_wr* bad = nullptr;
  if (const int rc = ibv_post_send(setup_.qp, &wr, &bad); rc != 0) {
    setup_.errors->fatal("phase " + std::to_string(phase_) + " qp " +
                         std::to_string(setup_.qp_index) +
                         ": ibv_post_send of a marker failed: " + std::strerror(rc));
    return false;
  }
  ++markers_outstanding_;
  const int64_t interval =
      std::min(kMarkerRetryMaxNs, kMarkerRetryFirstNs << std::min<uint32_t>(markers_this_round_, 4));
  ++markers_this_round_;
  next_marker_ns_ = now + interval;
  return true;
}

void Lane::on_marker_completion(const ibv_wc& wc) {
  if (markers_outstanding_ == 0 || wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_SEND) {
    setup_.errors->fatal("phase " + std::to_string(phase_) + " qp " +
                         std::to_string(setup_.qp_index) + ": marker completion status " +
                         std::to_string(wc.status) + " opcode " + std::to_string(wc.opcode));
    return;
  }
  --markers_outstanding_;
}

void Lane::on_round_done(uint32_t round, int64_t now) {
  // Answers to a repeated marker of an earlier round are ignored.
  if (state_ != State::kMarking || round != (round_ & MarkerTag::kRoundMask)) return;
  ++round_;
  last_completion_ns_ = now;
  // Markers repeated this round may still arrive in the next one and take a WQE
  // each: the next round leaves room for them.
  const uint32_t surplus = markers_this_round_ > 0 ? markers_this_round_ - 1 : 0;
  round_budget_ = setup_.round_budget > surplus + 1 ? setup_.round_budget - surplus : 1;
  round_consumed_ = 0;
  if (!items_.empty() || atomics_unchecked_) {
    state_ = State::kCheckReady;
  } else {
    state_ = next_ == plan_.size() ? State::kDone : State::kIssuing;
  }
}

}  // namespace softrdma::traffic
