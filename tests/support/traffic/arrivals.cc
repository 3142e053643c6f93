#include "traffic/arrivals.h"

#include <arpa/inet.h>

#include <cstring>

#include "traffic/content.h"

namespace softrdma::traffic {

namespace {

constexpr uint32_t kSlackChecked = 64;  // bytes past a message that must be poison

ibv_wc_opcode receive_opcode(const Message& m) {
  return m.op == Op::kWriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
}

}  // namespace

void Arrivals::start_phase(uint32_t phase, const std::vector<Message>& peer_plan) {
  phase_ = phase;
  expected_.clear();
  for (const Message& m : peer_plan)
    if (op_info(m.op).consumes_recv) expected_.push_back(m);
  fate_.assign(expected_.size(), Fate::kPending);
  next_ = 0;
  resolved_ = 0;
  rounds_closed_ = 0;
}

std::string Arrivals::where(const Message& m) const {
  return "phase " + std::to_string(phase_) + " qp " + std::to_string(setup_.qp_index) +
         " peer msg " + std::to_string(m.index) + " " + std::string(op_info(m.op).name) + " " +
         std::to_string(m.length) + " B (receive)";
}

std::optional<MarkerTag> Arrivals::on_completion(const ibv_wc& wc, const SlotPool& pool,
                                                 uint32_t slot) {
  ++setup_.verified->completions;
  const std::string at = "phase " + std::to_string(phase_) + " qp " +
                         std::to_string(setup_.qp_index) + " receive slot " +
                         std::to_string(slot);
  if (wc.status != IBV_WC_SUCCESS) {
    setup_.errors->fatal(at + ": completion status " + std::to_string(wc.status));
    return std::nullopt;
  }
  if (wc.qp_num != setup_.qp_num || wc.src_qp != setup_.peer_qpn)
    setup_.errors->add(at + ": qp_num " + std::to_string(wc.qp_num) + " src_qp " +
                       std::to_string(wc.src_qp));
  const uint32_t header = setup_.transport == Transport::kUd ? kGrhBytes : 0;
  if (header != 0) {
    if ((wc.wc_flags & IBV_WC_GRH) == 0 || wc.byte_len < header) {
      setup_.errors->add(at + ": UD completion without a GRH (byte_len " +
                         std::to_string(wc.byte_len) + ")");
      return std::nullopt;
    }
    check_grh(pool, slot);
  }
  const uint32_t length = wc.byte_len - header;
  const bool with_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
  if (length == 0 && with_imm && wc.opcode == IBV_WC_RECV) {
    const MarkerTag tag = MarkerTag::from_imm(ntohl(wc.imm_data));
    if (tag.phase == (phase_ & MarkerTag::kPhaseMask)) return tag;
    return std::nullopt;  // a repeated marker of an earlier phase
  }
  std::vector<uint8_t> payload;
  if (wc.opcode == IBV_WC_RECV) {
    if (length > pool.slot_bytes() - header) {
      setup_.errors->add(at + ": byte_len " + std::to_string(wc.byte_len) + " beyond the buffer");
      return std::nullopt;
    }
    payload.resize(length);
    pool.copy_out(slot, header, payload);
    // Not on UC: a message dropped part-way leaves its first packets in the WQE,
    // which the next message takes (uc.md), so bytes past that one may be written.
    if (setup_.transport != Transport::kUc &&
        !pool.is_poison(slot, header + length, kSlackChecked))
      setup_.errors->add(at + ": bytes past the message were written");
    if (setup_.spoil_first_send && !send_spoiled_ && length > 0) {
      payload[0] ^= 0x01;
      send_spoiled_ = true;
    }
  }
  if (is_unreliable(setup_.transport)) {
    match_unreliable(wc, payload);
  } else if (next_ < expected_.size()) {
    check_reliable(expected_[next_], wc, payload);
    received(next_++, payload);
  } else {
    setup_.errors->fatal(at + ": a message beyond the peer's plan (" +
                         std::to_string(wc.byte_len) + " B)");
  }
  return std::nullopt;
}

// The source GID in the GRH is the peer's; the destination ours. For an
// IPv4-mapped GID the 40 bytes hold 20 zero bytes and an IPv4 header (source
// address at byte 12 of it, destination at 16), else an IPv6 header (source at
// byte 8, destination at 24): ud.md, as rdma-core's ibv_init_ah_from_wc reads it.
void Arrivals::check_grh(const SlotPool& pool, uint32_t slot) {
  uint8_t grh[kGrhBytes];
  pool.copy_out(slot, 0, grh);
  static constexpr uint8_t kV4Prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  const bool v4 = std::memcmp(setup_.peer_gid.data(), kV4Prefix, 12) == 0;
  const bool ok = v4 ? std::memcmp(grh + 32, setup_.peer_gid.data() + 12, 4) == 0 &&
                           std::memcmp(grh + 36, setup_.local_gid.data() + 12, 4) == 0
                     : std::memcmp(grh + 8, setup_.peer_gid.data(), 16) == 0 &&
                           std::memcmp(grh + 24, setup_.local_gid.data(), 16) == 0;
  if (!ok)
    setup_.errors->add("phase " + std::to_string(phase_) + " qp " +
                       std::to_string(setup_.qp_index) +
                       ": the GRH's addresses are not the peer's and ours");
}

bool Arrivals::agrees(const Message& m, const ibv_wc& wc,
                      const std::vector<uint8_t>& payload) const {
  const OpInfo& info = op_info(m.op);
  const uint32_t header = setup_.transport == Transport::kUd ? kGrhBytes : 0;
  if (wc.opcode != receive_opcode(m) || wc.byte_len - header != m.length) return false;
  const bool has_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
  if (has_imm != info.imm || (info.imm && ntohl(wc.imm_data) != m.imm)) return false;
  return wc.opcode != IBV_WC_RECV || first_mismatch(m.key, 0, payload) == kNoMismatch;
}

void Arrivals::check_reliable(const Message& m, const ibv_wc& wc,
                              const std::vector<uint8_t>& payload) {
  if (wc.opcode != receive_opcode(m))
    setup_.errors->add(where(m) + ": opcode " + std::to_string(wc.opcode));
  if (wc.byte_len != m.length)
    setup_.errors->add(where(m) + ": byte_len " + std::to_string(wc.byte_len));
  const bool has_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
  if (has_imm != op_info(m.op).imm || (has_imm && ntohl(wc.imm_data) != m.imm))
    setup_.errors->add(where(m) + ": immediate data missing or wrong");
  if (wc.opcode == IBV_WC_RECV && payload.size() == m.length) {
    const size_t bad = first_mismatch(m.key, 0, payload);
    if (bad != kNoMismatch)
      setup_.errors->add(where(m) + ": data wrong at byte " + std::to_string(bad));
  }
}

void Arrivals::match_unreliable(const ibv_wc& wc, const std::vector<uint8_t>& payload) {
  for (size_t j = next_; j < expected_.size(); ++j) {
    if (!agrees(expected_[j], wc, payload)) continue;
    for (size_t k = next_; k < j; ++k) {  // skipped: lost on the way
      fate_[k] = Fate::kLost;
      ++setup_.verified->lost;
      ++resolved_;
    }
    next_ = j + 1;
    received(j, payload);
    return;
  }
  for (size_t j = next_; j-- > 0;) {
    if (!agrees(expected_[j], wc, payload)) continue;
    // Reordered: UD has no order; a UC responder begins a new message at any
    // FIRST or ONLY packet whatever its PSN (IBA 9.8.3.1, uc.md), so a packet held
    // back, or a duplicate, still lands.
    if (fate_[j] == Fate::kLost) {
      fate_[j] = Fate::kPending;
      --setup_.verified->lost;
      --resolved_;
      ++setup_.verified->late;
      received(j, payload);
    } else {
      ++setup_.verified->duplicates;
      setup_.verified->bytes_compared += payload.size();
    }
    return;
  }
  setup_.errors->add("phase " + std::to_string(phase_) + " qp " + std::to_string(setup_.qp_index) +
                     ": a " + std::to_string(wc.byte_len) +
                     " B message that is no message of the peer's plan (wrong bytes?)");
}

void Arrivals::received(size_t index, const std::vector<uint8_t>& payload) {
  fate_[index] = Fate::kReceived;
  ++resolved_;
  ++setup_.verified->received;
  setup_.verified->bytes_compared += payload.size();
}

bool Arrivals::close_round(uint32_t round, uint32_t consumed_low) {
  if (round != (rounds_closed_ & MarkerTag::kRoundMask)) return false;
  ++rounds_closed_;
  const size_t consumed =
      next_ + ((consumed_low - uint32_t(next_)) & MarkerTag::kConsumedMask);
  if (consumed > expected_.size()) {
    setup_.errors->fatal("phase " + std::to_string(phase_) + " qp " +
                         std::to_string(setup_.qp_index) + ": a marker counts " +
                         std::to_string(consumed) + " messages, the plan has " +
                         std::to_string(expected_.size()));
    return false;
  }
  for (; next_ < consumed; ++next_) {
    fate_[next_] = Fate::kLost;
    ++setup_.verified->lost;
    ++resolved_;
  }
  return true;
}

std::string Arrivals::describe() const {
  return "qp " + std::to_string(setup_.qp_index) + " arrivals: resolved " +
         std::to_string(resolved_) + "/" + std::to_string(expected_.size()) + ", next " +
         std::to_string(next_) + ", rounds closed " + std::to_string(rounds_closed_);
}

}  // namespace softrdma::traffic
