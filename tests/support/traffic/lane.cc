#include "traffic/lane.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "traffic/content.h"

namespace softrdma::traffic {

namespace {

constexpr uint64_t kSendSglSalt = 0x5e9d5a17;

std::span<uint8_t> piece_span(uint8_t* buf, const Piece& p) {
  return {buf + p.mem_offset, p.length};
}

// The complement of the expected contents: a buffer poisoned this way differs from
// the right result in every byte, so even a 1-byte message that never arrived is seen.
void poison(uint64_t key, uint64_t offset, std::span<uint8_t> out) {
  fill_content(key, offset, out);
  for (uint8_t& b : out) b = uint8_t(~b);
}

}  // namespace

Lane::Lane(const LaneSetup& setup)
    : setup_(setup), arena_(setup.local->size()), slot_model_(setup.slot_initial) {}

const char* Lane::to_string(State s) {
  switch (s) {
    case State::kIssuing:
      return "issuing";
    case State::kDraining:
      return "draining";
    case State::kMarking:
      return "marking-round";
    case State::kCheckReady:
      return "check-ready";
    case State::kAwaitingReply:
      return "awaiting-check-reply";
    case State::kDone:
      return "done";
  }
  return "?";
}

uint64_t Lane::completed() const {
  uint64_t n = 0;
  for (const OpStats& s : stats_) n += s.messages;
  return n;
}

void Lane::start_phase(uint32_t phase, std::vector<Message> plan, uint32_t depth) {
  phase_ = phase;
  plan_ = std::move(plan);
  next_ = 0;
  depth_ = std::max<uint32_t>(depth, 1);
  stats_ = OpTable{};
  first_post_ns_ = 0;
  last_completion_ns_ = 0;
  unsignaled_run_ = 0;
  consumed_posted_ = 0;
  round_consumed_ = 0;
  round_ = 0;
  round_budget_ = std::max<uint32_t>(setup_.round_budget, 1);
  markers_this_round_ = 0;
  state_ = State::kIssuing;
  advance();
}

std::string Lane::where(const Message& m) const {
  return "phase " + std::to_string(phase_) + " qp " + std::to_string(setup_.qp_index) + " msg " +
         std::to_string(m.index) + " " + std::string(op_info(m.op).name) + " " +
         std::to_string(m.length) + " B";
}

bool Lane::epoch_full_for(const Message& m, uint64_t landing_used, size_t items) const {
  if (items >= kMaxCheckItems) return true;
  return op_info(m.op).lands && landing_used + m.length > epoch_landing_length();
}

// UC: a WRITE packet the fault injector held back for reordering can arrive after
// the epoch's marker, its check and the re-poisoning (UC has no duplicate
// detection: IBA 9.8.3 accepts a late ONLY packet as a new message). Epochs
// alternate between the two halves of the landing region, so such a packet
// lands where no epoch is being filled or checked, unless it is two epochs late.
// (Each half holds the largest message: the region is at least twice it.)
uint64_t Lane::epoch_landing_length() const {
  return setup_.transport == Transport::kUc ? setup_.landing.length / 2 : setup_.landing.length;
}

uint64_t Lane::epoch_landing_base() const {
  return setup_.transport == Transport::kUc && epoch_ % 2 == 1 ? epoch_landing_length() : 0;
}

// Unsignaled WRs complete silently when a later signaled one does (IBA 10.8.3.2);
// one must therefore follow soon, and the last WR before the lane waits for its
// queue to drain must be signaled or the wait would never end.
bool Lane::must_signal(const Message& m, uint64_t landing_after, size_t items_after) const {
  if (!m.unsignaled) return true;
  if (unsignaled_run_ + 1 >= std::min<uint32_t>(depth_, 4)) return true;
  if (next_ + 1 >= plan_.size()) return true;
  const uint32_t consumed_after = round_consumed_ + (op_info(m.op).consumes_recv ? 1 : 0);
  return epoch_full_for(plan_[next_ + 1], landing_after, items_after) ||
         ends_round(plan_[next_ + 1], consumed_after);
}

bool Lane::pump(int64_t now) {
  if (state_ == State::kMarking) {
    post_marker(now);
    return false;  // a repeated marker is no progress (the stall watchdog)
  }
  bool posted = false;
  while (state_ == State::kIssuing && next_ < plan_.size() && outstanding_.size() < depth_) {
    const Message& m = plan_[next_];
    if (epoch_full_for(m, landing_used_, items_.size() + outstanding_.size()) ||
        ends_round(m, round_consumed_)) {
      state_ = State::kDraining;
      break;
    }
    if (!post(m, now)) break;
    ++next_;
    posted = true;
  }
  advance();
  return posted;
}

void Lane::prepare_local(const Message& m, Outstanding& o, uint8_t* buf) {
  const OpInfo& info = op_info(m.op);
  if (info.atomic) {
    // The original value comes back here: poison it with its complement.
    const uint64_t bad = ~o.expected_original;
    std::memcpy(buf, &bad, 8);
  } else if (info.reads) {
    for (uint32_t i = 0; i < o.sgl.count; ++i)
      poison(setup_.exposed_key, m.read_offset + o.sgl.piece[i].msg_offset,
             piece_span(buf, o.sgl.piece[i]));
  } else {
    for (uint32_t i = 0; i < o.sgl.count; ++i)
      fill_content(m.key, o.sgl.piece[i].msg_offset, piece_span(buf, o.sgl.piece[i]));
  }
}

void Lane::set_remote(const Message& m, Outstanding& o, ibv_send_wr& wr) {
  const OpInfo& info = op_info(m.op);
  if (info.lands) {
    o.remote_offset = epoch_landing_base() + landing_used_;
    wr.wr.rdma.remote_addr = setup_.landing.addr + o.remote_offset;
    wr.wr.rdma.rkey = setup_.landing.rkey;
    landing_used_ += m.length;
  } else if (info.reads) {
    wr.wr.rdma.remote_addr = setup_.exposed.addr + m.read_offset;
    wr.wr.rdma.rkey = setup_.exposed.rkey;
  } else if (info.atomic) {
    // The model: atomics of one QP execute in order at the target (IBA 9.7.4.1.6
    // ordering within a QP), so each one's original value is known at post time.
    wr.wr.atomic.remote_addr = setup_.slot.addr;
    wr.wr.atomic.rkey = setup_.slot.rkey;
    o.expected_original = slot_model_;
    if (m.op == Op::kFetchAdd) {
      wr.wr.atomic.compare_add = m.operand;
      slot_model_ += m.operand;
    } else {
      const uint64_t compare = m.cas_hit ? slot_model_ : slot_model_ ^ 1;
      wr.wr.atomic.compare_add = compare;
      wr.wr.atomic.swap = m.operand;
      if (compare == slot_model_) slot_model_ = m.operand;
    }
    atomics_unchecked_ = true;
  }
}

bool Lane::post(const Message& m, int64_t now) {
  const OpInfo& info = op_info(m.op);
  const std::optional<uint64_t> offset = arena_.alloc(m.length);
  if (!offset) return false;  // wait for completions to free local buffers
  Outstanding o;
  o.msg = &m;
  o.local_offset = *offset;
  o.sgl = split_buffer(m.length, info.atomic ? 1 : m.send_sges, m.key ^ kSendSglSalt);
  ibv_send_wr wr{};
  set_remote(m, o, wr);
  uint8_t* buf = setup_.local->data() + *offset;
  prepare_local(m, o, buf);
  ibv_sge sge[kMaxSges];
  for (uint32_t i = 0; i < o.sgl.count; ++i)
    sge[i] = ibv_sge{reinterpret_cast<uint64_t>(buf + o.sgl.piece[i].mem_offset),
                     o.sgl.piece[i].length, setup_.local->key()};
  const size_t items_after = items_.size() + outstanding_.size() + 1;
  o.signaled = must_signal(m, landing_used_, items_after);
  wr.wr_id = m.index;
  wr.sg_list = sge;
  wr.num_sge = int(o.sgl.count);
  wr.opcode = info.wr_opcode;
  wr.send_flags = (o.signaled ? IBV_SEND_SIGNALED : 0) | (m.inline_data ? IBV_SEND_INLINE : 0);
  if (info.imm) wr.imm_data = htonl(m.imm);
  if (setup_.transport == Transport::kUd) {
    wr.wr.ud.ah = setup_.ah;
    wr.wr.ud.remote_qpn = setup_.remote_qpn;
    wr.wr.ud.remote_qkey = setup_.remote_qkey;
  }
  o.posted_ns = now;
  ibv_send_wr* bad = nullptr;
  if (const int rc = ibv_post_send(setup_.qp, &wr, &bad); rc != 0) {
    setup_.errors->fatal(where(m) + ": ibv_post_send failed: " + std::strerror(rc));
    return false;
  }
  if (info.consumes_recv) {
    ++consumed_posted_;
    ++round_consumed_;
  }
  unsignaled_run_ = o.signaled ? 0 : unsignaled_run_ + 1;
  if (first_post_ns_ == 0) first_post_ns_ = now;
  outstanding_.push_back(o);
  return true;
}

void Lane::check_wc(const ibv_wc& wc, const Outstanding& o) {
  const Message& m = *o.msg;
  const OpInfo& info = op_info(m.op);
  if (wc.status != IBV_WC_SUCCESS) {
    setup_.errors->fatal(where(m) + ": completion status " + std::to_string(wc.status) +
                         " (vendor_err " + std::to_string(wc.vendor_err) + ")");
    return;
  }
  const uint32_t want_len = info.atomic ? 8 : m.length;
  if (wc.opcode != info.send_wc)
    setup_.errors->add(where(m) + ": completion opcode " + std::to_string(wc.opcode) +
                       ", expected " + std::to_string(info.send_wc));
  if (wc.byte_len != want_len)
    setup_.errors->add(where(m) + ": completion byte_len " + std::to_string(wc.byte_len) +
                       ", expected " + std::to_string(want_len));
  if (wc.qp_num != setup_.qp->qp_num)
    setup_.errors->add(where(m) + ": completion qp_num " + std::to_string(wc.qp_num));
}

void Lane::on_completion(const ibv_wc& wc, int64_t now) {
  ++setup_.verified->completions;
  if ((wc.wr_id & kMarkerWrId) != 0) return on_marker_completion(wc);
  // Completions come in posting order; unsignaled WRs before this one completed
  // with it.
  while (!outstanding_.empty() && !outstanding_.front().signaled &&
         outstanding_.front().msg->index != wc.wr_id) {
    finish(outstanding_.front(), now);
    outstanding_.pop_front();
  }
  if (outstanding_.empty() || outstanding_.front().msg->index != wc.wr_id) {
    setup_.errors->fatal("phase " + std::to_string(phase_) + " qp " +
                         std::to_string(setup_.qp_index) + ": send completion wr_id " +
                         std::to_string(wc.wr_id) + " out of order (expected " +
                         (outstanding_.empty() ? std::string("none")
                                               : std::to_string(outstanding_.front().msg->index)) +
                         "), status " + std::to_string(wc.status));
    return;
  }
  const Outstanding& o = outstanding_.front();
  if (!o.signaled) setup_.errors->add(where(*o.msg) + ": completion of an unsignaled WR");
  check_wc(wc, o);
  if (setup_.errors->is_fatal()) return;
  finish(o, now);
  outstanding_.pop_front();
  advance();
}

void Lane::finish_read(const Outstanding& o, uint8_t* buf) {
  const Message& m = *o.msg;
  if (setup_.spoil_first_read && !read_spoiled_) {
    buf[o.sgl.piece[0].mem_offset] ^= 0x01;
    read_spoiled_ = true;
  }
  uint32_t crc = 0;
  for (uint32_t i = 0; i < o.sgl.count; ++i) {
    const Piece& p = o.sgl.piece[i];
    const std::span<const uint8_t> got(buf + p.mem_offset, p.length);
    const size_t bad = first_mismatch(setup_.exposed_key, m.read_offset + p.msg_offset, got);
    if (bad != kNoMismatch) {
      setup_.errors->add(where(m) + ": READ data wrong at message byte " +
                         std::to_string(p.msg_offset + bad));
    }
    crc = crc32_of(got, crc);
  }
  setup_.verified->bytes_compared += m.length;
  items_.push_back(CheckItem{CheckKind::kRead, m.index, m.read_offset, m.length, setup_.exposed_key,
                             m.read_offset});
  crcs_.push_back(crc);
}

void Lane::finish(const Outstanding& o, int64_t now) {
  const Message& m = *o.msg;
  const OpInfo& info = op_info(m.op);
  stats_[op_index(m.op)].add(m.length, now - o.posted_ns);
  if (info.lands || info.consumes_recv) ++setup_.verified->sent;
  last_completion_ns_ = now;
  uint8_t* buf = setup_.local->data() + o.local_offset;
  if (info.reads) {
    finish_read(o, buf);
  } else if (info.lands) {
    uint32_t crc = 0;
    for (uint32_t i = 0; i < o.sgl.count; ++i)
      crc = crc32_of({buf + o.sgl.piece[i].mem_offset, o.sgl.piece[i].length}, crc);
    items_.push_back(CheckItem{CheckKind::kWrite, m.index, o.remote_offset, m.length, m.key, 0});
    crcs_.push_back(crc);
  } else if (info.atomic) {
    uint64_t got = 0;
    std::memcpy(&got, buf, 8);
    if (got != o.expected_original) {
      setup_.errors->add(where(m) + ": atomic returned " + std::to_string(got) + ", model says " +
                         std::to_string(o.expected_original));
    }
    ++setup_.verified->atomics;
  }
  arena_.free_oldest();
}

void Lane::advance() {
  if (state_ == State::kIssuing && next_ == plan_.size()) state_ = State::kDraining;
  if (state_ == State::kDraining && outstanding_.empty()) {
    if (is_unreliable(setup_.transport)) {
      after_drain();
    } else if (!items_.empty() || atomics_unchecked_) {
      state_ = State::kCheckReady;
    } else {
      state_ = next_ == plan_.size() ? State::kDone : State::kIssuing;
    }
  }
}

std::optional<CheckRequest> Lane::take_check() {
  if (state_ != State::kCheckReady) return std::nullopt;
  state_ = State::kAwaitingReply;
  return CheckRequest{phase_, setup_.qp_index, epoch_, items_};
}

void Lane::on_check_reply(const CheckReply& reply) {
  const std::string at = "phase " + std::to_string(phase_) + " qp " +
                         std::to_string(setup_.qp_index) + " epoch " + std::to_string(epoch_);
  if (state_ != State::kAwaitingReply || reply.epoch != epoch_ || reply.phase != phase_ ||
      reply.results.size() != items_.size()) {
    setup_.errors->fatal(at + ": unexpected check reply");
    return;
  }
  for (size_t i = 0; i < items_.size(); ++i) {
    const CheckItem& item = items_[i];
    const CheckResult& r = reply.results[i];
    const std::string what = at + " msg " + std::to_string(item.message) +
                             (item.kind == CheckKind::kWrite ? " WRITE " : " READ ") +
                             std::to_string(item.length) + " B";
    const bool plain_write = item.kind == CheckKind::kWrite &&
                             plan_[item.message].op == Op::kWrite;
    if (r.lost) {
      // UC: lost on the way, every packet whole or never written (checks.h). A
      // WRITE with immediate is counted by the receiver (it had no completion).
      if (plain_write) ++setup_.verified->lost;
      continue;
    }
    if (plain_write) ++setup_.verified->received;
    if (r.mismatch != ~uint64_t(0))
      setup_.errors->add(what + ": target's bytes wrong from byte " + std::to_string(r.mismatch));
    if (r.crc != crcs_[i]) {
      setup_.errors->add(what + ": CRC differs (requester " + std::to_string(crcs_[i]) +
                         ", target " + std::to_string(r.crc) + ")");
    } else {
      ++setup_.verified->crc_matches;
    }
  }
  if (reply.atomic_slot != slot_model_) {
    setup_.errors->add(at + ": atomic slot holds " + std::to_string(reply.atomic_slot) +
                       ", model says " + std::to_string(slot_model_));
  } else if (atomics_unchecked_) {
    ++setup_.verified->atomics;
  }
  atomics_unchecked_ = false;
  items_.clear();
  crcs_.clear();
  landing_used_ = 0;
  ++epoch_;
  state_ = next_ == plan_.size() ? State::kDone : State::kIssuing;
}

std::string Lane::describe(int64_t now) const {
  std::string s = "qp " + std::to_string(setup_.qp_index) + " (qpn " +
                  std::to_string(setup_.qp->qp_num) + "): " + to_string(state_) + ", posted " +
                  std::to_string(next_) + "/" + std::to_string(plan_.size()) + ", outstanding " +
                  std::to_string(outstanding_.size()) + ", epoch " + std::to_string(epoch_);
  if (!outstanding_.empty()) {
    const Outstanding& o = outstanding_.front();
    s += ", oldest " + where(*o.msg) + " posted " +
         std::to_string((now - o.posted_ns) / 1'000'000) + " ms ago";
  }
  return s;
}

}  // namespace softrdma::traffic
