#include "traffic/receiver.h"

#include <arpa/inet.h>

#include <cstring>

#include "traffic/content.h"

namespace softrdma::traffic {

namespace {

constexpr uint64_t kRecvSglSalt = 0x2ecf5a17;

// Receive buffers are poisoned with the complement of what should arrive (so every
// byte must change) and the slack with the complement of what "would" follow.
void poison(uint64_t key, uint64_t offset, std::span<uint8_t> out) {
  fill_content(key, offset, out);
  for (uint8_t& b : out) b = uint8_t(~b);
}

bool is_poison(uint64_t key, uint64_t offset, std::span<const uint8_t> in) {
  std::vector<uint8_t> want(in.size());
  poison(key, offset, want);
  return std::memcmp(want.data(), in.data(), in.size()) == 0;
}

}  // namespace

Receiver::Receiver(const ReceiverSetup& setup) : setup_(setup), arena_(setup.buffers->size()) {}

void Receiver::start_phase(uint32_t phase, const std::vector<Message>& peer_plan) {
  phase_ = phase;
  expected_.clear();
  for (const Message& m : peer_plan)
    if (op_info(m.op).consumes_recv) expected_.push_back(m);
  next_post_ = 0;
  completed_ = 0;
  received_ = OpStats{};
}

std::string Receiver::where(const Message& m) const {
  return "phase " + std::to_string(phase_) + " qp " + std::to_string(setup_.qp_index) +
         " peer msg " + std::to_string(m.index) + " " + std::string(op_info(m.op).name) + " " +
         std::to_string(m.length) + " B (receive)";
}

bool Receiver::pump() {
  bool posted = false;
  while (next_post_ < expected_.size() && posted_.size() < setup_.window) {
    if (!post(expected_[next_post_])) break;
    ++next_post_;
    posted = true;
  }
  return posted;
}

bool Receiver::post(const Message& m) {
  Posted p;
  p.msg = &m;
  // RDMA WRITE with immediate consumes a receive WQE but puts no data in it.
  const bool data = m.op != Op::kWriteImm;
  if (data) {
    p.capacity = m.length + m.recv_slack;
    const std::optional<uint64_t> offset = arena_.alloc(p.capacity);
    if (!offset) return false;
    p.offset = *offset;
    p.sgl = split_buffer(p.capacity, m.recv_sges, m.key ^ kRecvSglSalt);
  }
  uint8_t* buf = setup_.buffers->data() + p.offset;
  ibv_sge sge[kMaxSges];
  for (uint32_t i = 0; i < p.sgl.count; ++i) {
    const Piece& piece = p.sgl.piece[i];
    poison(m.key, piece.msg_offset, {buf + piece.mem_offset, piece.length});
    sge[i] = ibv_sge{reinterpret_cast<uint64_t>(buf + piece.mem_offset), piece.length,
                     setup_.buffers->key()};
  }
  ibv_recv_wr wr{};
  wr.wr_id = m.index;
  wr.sg_list = sge;
  wr.num_sge = int(p.sgl.count);
  ibv_recv_wr* bad = nullptr;
  if (const int rc = ibv_post_recv(setup_.qp, &wr, &bad); rc != 0) {
    setup_.errors->fatal(where(m) + ": ibv_post_recv failed: " + std::strerror(rc));
    if (data) arena_.free_oldest();
    return false;
  }
  posted_.push_back(p);
  return true;
}

void Receiver::check_wc(const ibv_wc& wc, const Message& m) {
  const OpInfo& info = op_info(m.op);
  const ibv_wc_opcode want = m.op == Op::kWriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
  if (wc.opcode != want)
    setup_.errors->add(where(m) + ": opcode " + std::to_string(wc.opcode) + ", expected " +
                       std::to_string(want));
  if (wc.byte_len != m.length)
    setup_.errors->add(where(m) + ": byte_len " + std::to_string(wc.byte_len));
  const bool has_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
  if (has_imm != info.imm) {
    setup_.errors->add(where(m) + ": IBV_WC_WITH_IMM " + (has_imm ? "set" : "missing"));
  } else if (info.imm && ntohl(wc.imm_data) != m.imm) {
    setup_.errors->add(where(m) + ": imm_data " + std::to_string(ntohl(wc.imm_data)) +
                       ", expected " + std::to_string(m.imm));
  }
  if (wc.qp_num != setup_.qp->qp_num || wc.src_qp != setup_.peer_qpn)
    setup_.errors->add(where(m) + ": qp_num " + std::to_string(wc.qp_num) + " src_qp " +
                       std::to_string(wc.src_qp));
}

void Receiver::check_bytes(const Posted& p) {
  const Message& m = *p.msg;
  uint8_t* buf = setup_.buffers->data() + p.offset;
  if (setup_.spoil_first_send && !send_spoiled_ && m.length > 0) {
    buf[p.sgl.piece[0].mem_offset] ^= 0x01;
    send_spoiled_ = true;
  }
  for (uint32_t i = 0; i < p.sgl.count; ++i) {
    const Piece& piece = p.sgl.piece[i];
    const uint32_t begin = piece.msg_offset, end = piece.msg_offset + piece.length;
    // [begin, min(end, length)) must hold the message; the rest is slack.
    const uint32_t data_end = std::min(end, m.length);
    if (begin < data_end) {
      const std::span<const uint8_t> got(buf + piece.mem_offset, data_end - begin);
      const size_t bad = first_mismatch(m.key, begin, got);
      if (bad != kNoMismatch)
        setup_.errors->add(where(m) + ": data wrong at byte " + std::to_string(begin + bad));
    }
    const uint32_t slack_begin = std::max(begin, m.length);
    if (slack_begin < end &&
        !is_poison(m.key, slack_begin,
                   {buf + piece.mem_offset + (slack_begin - begin), end - slack_begin}))
      setup_.errors->add(where(m) + ": bytes past the message were written");
  }
  setup_.verified->bytes_compared += m.length;
}

void Receiver::on_completion(const ibv_wc& wc) {
  ++setup_.verified->completions;
  if (posted_.empty() || posted_.front().msg->index != wc.wr_id) {
    setup_.errors->fatal("phase " + std::to_string(phase_) + " qp " +
                         std::to_string(setup_.qp_index) + ": receive completion wr_id " +
                         std::to_string(wc.wr_id) + " out of order, status " +
                         std::to_string(wc.status));
    return;
  }
  const Posted p = posted_.front();
  posted_.pop_front();
  const Message& m = *p.msg;
  if (wc.status != IBV_WC_SUCCESS) {
    setup_.errors->fatal(where(m) + ": completion status " + std::to_string(wc.status));
    return;
  }
  check_wc(wc, m);
  if (m.op != Op::kWriteImm) {
    check_bytes(p);
    arena_.free_oldest();
  }
  received_.add(m.length, 0);
  ++setup_.verified->received;
  ++completed_;
}

std::string Receiver::describe() const {
  return "qp " + std::to_string(setup_.qp_index) + " receives: completed " +
         std::to_string(completed_) + "/" + std::to_string(expected_.size()) + ", posted " +
         std::to_string(posted_.size());
}

}  // namespace softrdma::traffic
