// The phases of a node: pump lanes and receivers, poll the CQs, serve the peer's
// check requests, and agree with the peer on the end of each phase. Blocks on the
// CQs' eventfd and the out-of-band socket when nothing is ready (two cores: the
// progress threads need them).
#include <poll.h>

#include <algorithm>
#include <cstdio>

#include "traffic/content.h"
#include "traffic/node.h"

namespace softrdma::traffic {

namespace {

constexpr int kPollBatch = 32;
// UD: a phase's last round closes once no datagram arrived for this long after
// its marker (a reordered one is held back at most 1 ms, fault_settings.h); one
// that still comes later in the phase is counted late, not lost (arrivals.h).
constexpr int64_t kUdQuietNs = 50'000'000;

}  // namespace

bool Side::lanes_done() const {
  return std::all_of(qps_.begin(), qps_.end(), [](const QpSlot& s) { return s.lane->done(); });
}

bool Side::receivers_done() const {
  return pending_closes_.empty() && std::all_of(qps_.begin(), qps_.end(), [](const QpSlot& s) {
           return s.receiver ? s.receiver->done() : s.arrivals->done();
         });
}

uint64_t Side::slot_value(uint32_t qp) const {
  // Written by this process's progress thread (the engine executes the atomics).
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(atomics_.data() + 8 * qp),
                         __ATOMIC_ACQUIRE);
}

void Side::start_phase(uint32_t phase) {
  const PhaseSpec& spec = config_.phases[phase];
  const Role peer = peer_of(config_.role);
  for (uint32_t q = 0; q < config_.qps; ++q) {
    QpSlot& s = qps_[q];
    s.lane->start_phase(phase,
                        make_plan(spec, config_.seed, phase, config_.role, q, peer_.exposed.length),
                        spec.depth);
    const std::vector<Message> peer_plan =
        make_plan(spec, config_.seed, phase, peer, q, exposed_.size());
    if (s.receiver) s.receiver->start_phase(phase, peer_plan);
    if (s.arrivals) s.arrivals->start_phase(phase, peer_plan);
  }
  current_phase_ = phase;
  // Receive WQEs first, then tell the peer to go: SENDs that find no receive WQE
  // are refused with RNR NAKs and resent, which costs the whole window (and on
  // UC, UD are dropped). Slot pools are always full (slot_pool.h).
  for (QpSlot& s : qps_)
    if (s.receiver) s.receiver->pump();
  Encoder start_msg;
  start_msg.u32(phase);
  oob_->send(MsgType::kPhaseStart, start_msg);
}

bool Side::run_phase(uint32_t phase) {
  start_phase(phase);
  const Verified before = verified_;
  last_progress_ns_ = now_ns();
  phase_done_sent_ = false;
  while (!errors_.is_fatal()) {
    const int64_t now = now_ns();
    const bool worked = step(phase, now);
    if (phase_done_sent_ && peer_phases_done_ > phase && receivers_done()) break;
    report_progress(phase, now);
    if (worked) {
      last_progress_ns_ = now;
      continue;
    }
    // A peer that finished the phase (its last) closes the channel once it has
    // sent its last frames, while this side may still be closing its own last UD
    // rounds (kUdQuietNs of quiet first): that close is no error; the stall timeout
    // still bounds the wait. Before the peer finished, a close is fatal, once the
    // frames that came with it are handled (a step did nothing). Under load in CI
    // the quiet time outlasted the peer.
    if (oob_->closed() && peer_phases_done_ <= phase) {
      errors_.fatal(oob_->error() + " before the end of phase " + std::to_string(phase));
      break;
    }
    if (now - last_progress_ns_ > int64_t(config_.stall_timeout_ms) * 1'000'000) {
      dump_state(now);
      errors_.fatal("no progress for " + std::to_string(config_.stall_timeout_ms) + " ms");
      break;
    }
    wait_for_events(now);
  }
  // The phase's time: from this node's first post to its last send completion.
  int64_t first = 0, end = 0;
  for (const QpSlot& s : qps_) {
    if (s.lane->first_post_ns() != 0 && (first == 0 || s.lane->first_post_ns() < first))
      first = s.lane->first_post_ns();
    end = std::max(end, s.lane->last_completion_ns());
  }
  report_phase(phase, first != 0 && end > first ? end - first : 0, before);
  if (errors_.is_fatal()) {
    dump_state(now_ns());
    Encoder e;
    e.str("fatal error in phase " + std::to_string(phase));
    oob_->send(MsgType::kFail, e);
    oob_->flush();
    return false;
  }
  return true;
}

// One turn of the loop; true when anything happened.
bool Side::step(uint32_t phase, int64_t now) {
  bool worked = false;
  for (QpSlot& s : qps_) {
    if (peer_phases_started_ > phase) worked |= s.lane->pump(now);
    if (s.receiver) worked |= s.receiver->pump();
  }
  worked |= poll_cqs(now);
  worked |= close_rounds(now);
  for (QpSlot& s : qps_) {
    if (std::optional<CheckRequest> r = s.lane->take_check()) {
      oob_->send(MsgType::kCheck, encode(*r));
      worked = true;
    }
  }
  if (!phase_done_sent_ && lanes_done()) {
    Encoder e;
    e.u32(phase);
    oob_->send(MsgType::kPhaseDone, e);
    phase_done_sent_ = true;
    worked = true;
  }
  worked |= handle_oob();
  return worked;
}

bool Side::poll_cqs(int64_t now) {
  bool any = false;
  ibv_wc wc[kPollBatch];
  for (ibv_cq* cq : {fabric_->send_cq(), fabric_->recv_cq()}) {
    const bool send = cq == fabric_->send_cq();
    int n;
    while ((n = ibv_poll_cq(cq, kPollBatch, wc)) > 0) {
      any = true;
      // The batch's own time, not the step's: a message posted earlier in this
      // step and complete already would otherwise take 0 ns (and a phase of
      // them 0 s, which the report shows as 0 MB/s).
      now = std::max(now, now_ns());
      for (int i = 0; i < n && !errors_.is_fatal(); ++i) {
        auto it = index_of_qpn_.find(wc[i].qp_num);
        if (it == index_of_qpn_.end()) {
          errors_.fatal("completion for unknown qp_num " + std::to_string(wc[i].qp_num));
          break;
        }
        if (send) {
          qps_[it->second].lane->on_completion(wc[i], now);
        } else {
          on_receive(wc[i], it->second, now);
        }
      }
    }
    if (n < 0) errors_.fatal("ibv_poll_cq failed");
  }
  return any;
}

void Side::on_receive(const ibv_wc& wc, uint32_t q, int64_t now) {
  QpSlot& s = qps_[q];
  if (s.receiver) return s.receiver->on_completion(wc);
  SlotPool& pool = s.pool ? *s.pool : *shared_pool_;
  const uint32_t slot = uint32_t(wc.wr_id);
  if (slot >= pool.slots()) return errors_.fatal("receive completion of no slot");
  last_receive_ns_ = now;
  const std::optional<MarkerTag> marker = s.arrivals->on_completion(wc, pool, slot);
  if (wc.status == IBV_WC_SUCCESS) pool.repost(slot, wc.byte_len);
  if (!marker) return;
  // UD, the phase's last round: datagrams reordered behind the marker must not
  // spill into the next phase, so it closes once receives were quiet a while.
  // Earlier rounds close at once (a datagram still behind is counted late).
  if (config_.transport == Transport::kUd && s.arrivals->is_last_round(marker->consumed)) {
    pending_closes_.push_back(PendingClose{q, *marker});
  } else if (s.arrivals->close_round(marker->round, marker->consumed)) {
    Encoder e;
    e.u32(current_phase_).u32(q).u32(marker->round);
    oob_->send(MsgType::kRoundDone, e);
  }
}

// UD: the last rounds whose markers arrived, once nothing arrived for a while.
bool Side::close_rounds(int64_t now) {
  if (pending_closes_.empty() || now - last_receive_ns_ < kUdQuietNs) return false;
  for (const PendingClose& p : pending_closes_) {
    if (!qps_[p.qp].arrivals->close_round(p.tag.round, p.tag.consumed)) continue;
    Encoder e;
    e.u32(current_phase_).u32(p.qp).u32(p.tag.round);
    oob_->send(MsgType::kRoundDone, e);
  }
  pending_closes_.clear();
  return true;
}

bool Side::handle_oob() {
  if (!oob_->flush() || !oob_->receive()) {
    errors_.fatal(oob_->error());
    return false;
  }
  bool any = false;
  while (std::optional<Frame> f = oob_->next()) {
    handle_frame(*f);
    any = true;
  }
  return any;
}

void Side::handle_frame(const Frame& f) {
  switch (f.type) {
    case MsgType::kCheck: {
      CheckRequest r;
      if (!decode(f.payload, r) || r.qp >= config_.qps) return errors_.fatal("bad check request");
      return answer_check(r);
    }
    case MsgType::kCheckReply: {
      CheckReply r;
      if (!decode(f.payload, r) || r.qp >= config_.qps) return errors_.fatal("bad check reply");
      return qps_[r.qp].lane->on_check_reply(r);
    }
    case MsgType::kPhaseStart:
      ++peer_phases_started_;
      return;
    case MsgType::kPhaseDone:
      ++peer_phases_done_;
      return;
    case MsgType::kRoundDone: {
      Decoder d(f.payload);
      const uint32_t phase = d.u32(), qp = d.u32(), round = d.u32();
      if (!d.ok() || qp >= config_.qps) return errors_.fatal("bad round-done message");
      if (phase == current_phase_) qps_[qp].lane->on_round_done(round, now_ns());
      return;
    }
    case MsgType::kFail: {
      Decoder d(f.payload);
      return errors_.fatal("the peer stopped: " + d.str());
    }
    case MsgType::kHello:
    case MsgType::kReady:
    case MsgType::kProgress:  // launcher-bound frames: not the peer's to send
    case MsgType::kPhaseResult:
    case MsgType::kFinalResult:
      break;
  }
  errors_.fatal("unexpected out-of-band message " + std::to_string(int(f.type)));
}

void Side::answer_check(const CheckRequest& r) {
  const QpSlot& s = qps_[r.qp];
  if (config_.inject_data_errors && !write_spoiled_) {
    for (const CheckItem& item : r.items) {
      if (item.kind != CheckKind::kWrite || item.length == 0 || item.offset >= s.landing.size())
        continue;
      s.landing.data()[item.offset] ^= 0x01;
      write_spoiled_ = true;
      break;
    }
  }
  const bool uc = config_.transport == Transport::kUc;
  const LandingPoison poison{landing_poison_key(r.qp), config_.mtu};
  const CheckReply reply = ::softrdma::traffic::answer_check(
      r, {s.landing.data(), s.landing.size()}, {exposed_.data(), exposed_.size()},
      slot_value(r.qp), uc ? &poison : nullptr);
  for (const CheckItem& item : r.items) verified_.bytes_compared += item.length;
  if (uc) {  // the next epoch's lost packets must find poison again
    for (const CheckItem& item : r.items)
      if (item.kind == CheckKind::kWrite && item.offset + item.length <= s.landing.size())
        fill_content(poison.key, item.offset, {s.landing.data() + item.offset, item.length});
  }
  oob_->send(MsgType::kCheckReply, encode(reply));
}

void Side::wait_for_events(int64_t now) {
  // Arm, then look once more: a completion between the last poll and the arm
  // would otherwise not wake us (ibv_req_notify_cq(3)).
  if (!fabric_->arm_notify()) return errors_.fatal("ibv_req_notify_cq failed");
  if (poll_cqs(now)) return;
  // Unreliable lanes repeat markers and close rounds on timers of their own.
  const int timeout_ms = is_unreliable(config_.transport) ? 10 : 100;
  pollfd fds[2] = {{fabric_->notify_fd(), POLLIN, 0},
                   {oob_->fd(), short(POLLIN | (oob_->wants_write() ? POLLOUT : 0)), 0}};
  poll(fds, 2, timeout_ms);
  fabric_->drain_notify();
}

void Side::dump_state(int64_t now) {
  std::fprintf(stderr, "[%s] state (peer finished %u phases):\n",
               std::string(role_name(config_.role)).c_str(), peer_phases_done_);
  for (const QpSlot& s : qps_) {
    std::fprintf(stderr, "  %s\n  %s\n", s.lane->describe(now).c_str(),
                 s.receiver ? s.receiver->describe().c_str() : s.arrivals->describe().c_str());
  }
}

int Side::run() {
  const std::string role(role_name(config_.role));
  if (config_.report_fd >= 0) report_ = std::make_unique<OobChannel>(config_.report_fd);
  std::string error;
  if (!setup(error)) {
    std::fprintf(stderr, "[%s] set-up failed: %s\n", role.c_str(), error.c_str());
    if (oob_) {
      Encoder e;
      e.str(role + " set-up failed: " + error);
      oob_->send(MsgType::kFail, e);
      oob_->flush();
    }
    return 2;
  }
  std::fprintf(stderr, "[%s] %s, %u %s QPs\n", role.c_str(), fabric_->describe().c_str(),
               config_.qps, std::string(transport_name(config_.transport)).c_str());
  for (uint32_t p = 0; p < config_.phases.size(); ++p)
    if (!run_phase(p)) break;
  report_final();
  return errors_.count() == 0 ? 0 : 1;
}

}  // namespace softrdma::traffic
