#include "traffic/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "traffic/content.h"

namespace softrdma::traffic {

namespace {

constexpr std::array<OpInfo, kOpCount> kOpTable = {{
    {"SEND", IBV_WR_SEND, IBV_WC_SEND, true, false, false, false, false},
    {"SEND_IMM", IBV_WR_SEND_WITH_IMM, IBV_WC_SEND, true, false, false, false, true},
    {"WRITE", IBV_WR_RDMA_WRITE, IBV_WC_RDMA_WRITE, false, true, false, false, false},
    {"WRITE_IMM", IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WC_RDMA_WRITE, true, true, false, false, true},
    {"READ", IBV_WR_RDMA_READ, IBV_WC_RDMA_READ, false, false, true, false, false},
    {"CMP_SWAP", IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WC_COMP_SWAP, false, false, false, true, false},
    {"FETCH_ADD", IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WC_FETCH_ADD, false, false, false, true, false},
}};

// Log-uniform in [lo, hi]: every size class (1 B, 1 KiB, 1 MiB ...) is as likely.
uint32_t draw_size(Rng& rng, uint32_t lo, uint32_t hi) {
  if (lo >= hi) return lo;
  const double a = std::log(double(lo)), b = std::log(double(hi) + 1.0);
  const double v = std::exp(a + (b - a) * rng.unit());
  return std::clamp<uint32_t>(uint32_t(v), lo, hi);
}

Op draw_op(Rng& rng, const PhaseSpec& spec) {
  uint64_t total = 0;
  for (uint32_t w : spec.weight) total += w;
  uint64_t pick = rng.below(std::max<uint64_t>(total, 1));
  for (Op op : kAllOps) {
    const uint32_t w = spec.weight[op_index(op)];
    if (pick < w) return op;
    pick -= w;
  }
  return Op::kSend;
}

// Scatter lists, inline data, unsignaled WRs, roomier receive buffers.
void add_variety(Rng& rng, Message& m) {
  const OpInfo& info = op_info(m.op);
  if (!info.atomic && m.length >= 4 && rng.chance(0.25)) m.send_sges = uint8_t(2 + rng.below(3));
  if (m.op == Op::kSend || m.op == Op::kSendImm) {
    if (rng.chance(0.25)) m.recv_sges = uint8_t(2 + rng.below(3));
    if (rng.chance(0.5)) m.recv_slack = uint32_t(rng.below(257));
  }
  if (!info.atomic && !info.reads && m.length <= kMaxInline && rng.chance(0.3))
    m.inline_data = true;
  if (m.length <= (64u << 10) && rng.chance(0.2)) m.unsignaled = true;
}

// Where QP 0 of the client puts its max-size message of non-atomic op k.
bool forced_op(const PhaseSpec& spec, Role issuer, uint32_t qp, uint32_t i, Op& op) {
  if (!spec.force_max || issuer != Role::kClient || qp != 0) return false;
  constexpr uint32_t kForced = 5;  // SEND, SEND_IMM, WRITE, WRITE_IMM, READ
  for (uint32_t k = 0; k < kForced; ++k) {
    if (spec.weight[op_index(kAllOps[k])] == 0) continue;  // the transport lacks it
    if (i == k * spec.messages / kForced) {
      op = kAllOps[k];
      return true;
    }
  }
  return false;
}

PhaseSpec make_spec(std::string label, std::initializer_list<Op> ops, uint32_t lo, uint32_t hi,
                    uint32_t messages, const PhaseListOptions& o) {
  PhaseSpec s;
  s.label = std::move(label);
  for (Op op : ops) s.weight[op_index(op)] = 1;
  s.min_size = lo;
  s.max_size = hi;
  s.messages = std::max<uint32_t>(1, uint32_t(std::lround(messages * o.scale)));
  s.depth = o.depth;
  return s;
}

PhaseSpec mix_spec(std::string label, uint32_t lo, uint32_t hi, uint32_t messages,
                   const PhaseListOptions& o) {
  PhaseSpec s = make_spec(std::move(label), {}, lo, hi, messages, o);
  s.weight.fill(1);
  s.both_directions = true;
  s.variety = true;
  return s;
}

}  // namespace

const OpInfo& op_info(Op op) { return kOpTable[op_index(op)]; }

std::optional<Op> op_from_name(std::string_view name) {
  for (Op op : kAllOps)
    if (op_info(op).name == name) return op;
  return std::nullopt;
}

std::string_view transport_name(Transport t) {
  switch (t) {
    case Transport::kRc:
      return "rc";
    case Transport::kUc:
      return "uc";
    case Transport::kUd:
      return "ud";
    case Transport::kSrq:
      return "srq";
  }
  return "?";
}

std::optional<Transport> transport_from_name(std::string_view name) {
  for (Transport t : {Transport::kRc, Transport::kUc, Transport::kUd, Transport::kSrq})
    if (transport_name(t) == name) return t;
  return std::nullopt;
}

bool transport_allows(Transport t, Op op) {
  switch (t) {
    case Transport::kRc:
    case Transport::kSrq:
      return true;
    case Transport::kUc:
      return op == Op::kSend || op == Op::kSendImm || op == Op::kWrite || op == Op::kWriteImm;
    case Transport::kUd:
      return op == Op::kSend || op == Op::kSendImm;
  }
  return false;
}

std::string_view role_name(Role r) { return r == Role::kServer ? "server" : "client"; }

std::vector<Message> make_plan(const PhaseSpec& spec, uint64_t seed, uint32_t phase, Role issuer,
                               uint32_t qp, uint64_t exposed_bytes) {
  if (issuer == Role::kServer && !spec.both_directions) return {};
  Rng rng(make_key(seed, phase, uint64_t(issuer), qp));
  std::vector<Message> plan(spec.messages);
  for (uint32_t i = 0; i < spec.messages; ++i) {
    Message& m = plan[i];
    m.index = i;
    m.op = draw_op(rng, spec);
    m.length = draw_size(rng, spec.min_size, spec.max_size);
    if (forced_op(spec, issuer, qp, i, m.op)) m.length = spec.max_size;
    if (op_info(m.op).atomic) m.length = 8;
    m.length = std::min<uint64_t>(m.length, exposed_bytes);
    m.key = make_key(seed ^ 0xc0ffee, (uint64_t(phase) << 1) | uint64_t(issuer), qp, i);
    m.read_offset = rng.below(exposed_bytes - m.length + 1);
    m.imm = uint32_t(rng.next());
    m.operand = rng.next();
    m.cas_hit = rng.chance(0.75);
    if (spec.variety) add_variety(rng, m);
  }
  return plan;
}

Sgl split_buffer(uint32_t total, uint32_t count, uint64_t salt) {
  Sgl sgl;
  count = std::clamp<uint32_t>(std::min(count, total), 1, kMaxSges);
  std::array<uint32_t, kMaxSges + 1> cut{};
  Rng rng(salt);
  for (uint32_t i = 1; i < count; ++i) cut[i] = 1 + uint32_t(rng.below(total - 1));
  for (uint32_t i = 2; i < count; ++i)  // insertion sort of at most three cuts
    for (uint32_t j = i; j > 1 && cut[j - 1] > cut[j]; --j) std::swap(cut[j - 1], cut[j]);
  cut[count] = total;
  // Drop empty pieces (repeated cut points).
  uint32_t n = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (cut[i + 1] == cut[i] && !(total == 0 && n == 0)) continue;
    sgl.piece[n++] = Piece{cut[i], 0, cut[i + 1] - cut[i]};
  }
  sgl.count = n;
  // In the buffer the pieces sit in reverse order.
  uint32_t at = 0;
  for (uint32_t i = n; i-- > 0;) {
    sgl.piece[i].mem_offset = at;
    at += sgl.piece[i].length;
  }
  return sgl;
}

uint64_t exposed_key(uint64_t seed, Role owner) {
  return make_key(seed, 0xe4905ed, uint64_t(owner));
}

uint64_t atomic_initial(uint64_t seed, Role owner, uint32_t qp) {
  return make_key(seed, 0xa70b1c, uint64_t(owner), qp);
}

std::vector<PhaseSpec> demo_phases(const PhaseListOptions& o) {
  std::vector<PhaseSpec> phases;
  const uint32_t mid = std::min<uint32_t>(64u << 10, o.max_size);
  for (Op op : {Op::kSend, Op::kSendImm, Op::kWrite, Op::kWriteImm, Op::kRead}) {
    const std::string name(op_info(op).name);
    phases.push_back(make_spec(name + "/64B", {op}, 64, 64, 8000, o));
    phases.push_back(make_spec(name + "/" + size_label(mid), {op}, mid, mid, 300, o));
    phases.push_back(
        make_spec(name + "/" + size_label(o.max_size), {op}, o.max_size, o.max_size, 8, o));
  }
  for (Op op : {Op::kCmpSwap, Op::kFetchAdd})
    phases.push_back(make_spec(std::string(op_info(op).name) + "/8B", {op}, 8, 8, 8000, o));
  PhaseSpec mix = mix_spec("mix", 1, o.max_size, 40, o);
  mix.force_max = true;
  phases.push_back(mix);
  return phases;
}

std::vector<PhaseSpec> test_phases(const PhaseListOptions& o) {
  PhaseSpec mix = mix_spec("mix", 1, o.max_size, 12, o);
  mix.force_max = true;
  mix.messages = std::max<uint32_t>(mix.messages, 5);
  PhaseSpec small = mix_spec("small", 1, std::min<uint32_t>(16u << 10, o.max_size), 150, o);
  small.depth = std::max<uint32_t>(o.depth, 16);
  return {mix, small};
}

std::vector<PhaseSpec> custom_phases(const PhaseListOptions& o, const std::vector<Op>& ops,
                                     uint32_t messages) {
  PhaseSpec s = mix_spec("custom", 1, o.max_size, messages, o);
  s.weight.fill(0);
  for (Op op : ops) s.weight[op_index(op)] = 1;
  return {s};
}

std::vector<PhaseSpec> restrict_to_transport(std::vector<PhaseSpec> phases,
                                             const PhaseListOptions& o) {
  std::vector<PhaseSpec> out;
  for (PhaseSpec& p : phases) {
    // UD caps sizes at the MTU: two phases may then be the same (SEND/64KiB and
    // SEND/8MiB both become 4 KiB): the first, with more messages, stays.
    uint32_t left = 0;
    for (Op op : kAllOps) {
      if (!transport_allows(o.transport, op)) p.weight[op_index(op)] = 0;
      left += p.weight[op_index(op)];
    }
    if (left == 0) continue;
    if (o.transport == Transport::kUd) {
      p.max_size = std::min(p.max_size, o.mtu);
      p.min_size = std::min(p.min_size, p.max_size);
    }
    const bool repeated = std::any_of(out.begin(), out.end(), [&](const PhaseSpec& q) {
      return q.label == p.label && q.weight == p.weight && q.max_size == p.max_size;
    });
    if (!repeated) out.push_back(std::move(p));
  }
  return out;
}

std::string size_label(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
    std::snprintf(buf, sizeof buf, "%lluMiB", (unsigned long long)(bytes >> 20));
  else if (bytes >= 1024 && bytes % 1024 == 0)
    std::snprintf(buf, sizeof buf, "%lluKiB", (unsigned long long)(bytes >> 10));
  else
    std::snprintf(buf, sizeof buf, "%lluB", (unsigned long long)bytes);
  return buf;
}

}  // namespace softrdma::traffic
