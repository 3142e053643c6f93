// The traffic plan: which messages each QP of each process sends in each phase.
//
// A plan is a pure function of (seed, phase, issuing role, QP): both processes
// compute both directions' plans, so a receiver knows in advance every SEND it will
// get (size, scatter list, contents, immediate) and can check each byte, and the
// target of one-sided operations knows what should have landed.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace softrdma::traffic {

enum class Op : uint8_t { kSend, kSendImm, kWrite, kWriteImm, kRead, kCmpSwap, kFetchAdd };
inline constexpr size_t kOpCount = 7;
inline constexpr std::array<Op, kOpCount> kAllOps = {
    Op::kSend, Op::kSendImm, Op::kWrite, Op::kWriteImm, Op::kRead, Op::kCmpSwap, Op::kFetchAdd};

struct OpInfo {
  std::string_view name;
  ibv_wr_opcode wr_opcode;
  ibv_wc_opcode send_wc;  // the requester's completion
  bool consumes_recv;     // the target completes a receive WQE
  bool lands;             // writes the target's landing region
  bool reads;             // reads the target's exposed region
  bool atomic;            // 8 bytes on the target's atomic slot
  bool imm;               // carries immediate data
};
const OpInfo& op_info(Op op);
std::optional<Op> op_from_name(std::string_view name);
inline size_t op_index(Op op) { return static_cast<size_t>(op); }

// The QP transport a run uses (IBA 9.8: reliable and unreliable connections,
// unreliable datagrams; SRQ: RC QPs whose receive WQEs come from one shared
// receive queue, IBA 10.2.9).
enum class Transport : uint8_t { kRc, kUc, kUd, kSrq };
std::string_view transport_name(Transport t);
std::optional<Transport> transport_from_name(std::string_view name);
// What the transport offers (IBA Table 39): UC has no READ nor atomics, UD only
// SEND and SEND with immediate.
bool transport_allows(Transport t, Op op);
// UC and UD: nothing is retransmitted; a lost message is gone and counted.
inline bool is_unreliable(Transport t) { return t == Transport::kUc || t == Transport::kUd; }

enum class Role : uint8_t { kServer = 0, kClient = 1 };
inline Role peer_of(Role r) { return r == Role::kServer ? Role::kClient : Role::kServer; }
std::string_view role_name(Role r);

struct PhaseSpec {
  std::string label;                        // one word, e.g. "SEND/64KiB" or "mix"
  std::array<uint32_t, kOpCount> weight{};  // relative frequency of each op
  uint32_t min_size = 1;                    // message sizes: log-uniform in [min, max]
  uint32_t max_size = 1;
  uint32_t messages = 0;         // per QP and issuing process
  bool both_directions = false;  // the server issues too (else client only)
  uint32_t depth = 8;            // work requests outstanding per QP
  // Scatter/gather lists, inline data, unsignaled WRs, roomier receive buffers.
  bool variety = false;
  // QP 0 of the client sends one max_size message of every non-atomic op.
  bool force_max = false;
};

// One message of a plan. Everything the two processes must agree on is here.
struct Message {
  uint32_t index = 0;  // position in its lane's plan (the wr_id)
  Op op = Op::kSend;
  uint32_t length = 0;      // bytes; 8 for atomics
  uint8_t send_sges = 1;    // local gather/scatter list of the requester
  uint8_t recv_sges = 1;    // receive WQE's scatter list (SEND only)
  uint32_t recv_slack = 0;  // receive buffer bytes beyond the message (SEND only)
  bool inline_data = false;
  bool unsignaled = false;   // a hint: the lane signals anyway where it must
  bool cas_hit = false;      // CAS: compare with the slot's expected value (else miss)
  uint64_t operand = 0;      // FETCH_ADD: add; CAS: swap
  uint64_t key = 0;          // contents of SEND/WRITE data, salt of the SGL split
  uint64_t read_offset = 0;  // READ: offset into the target's exposed region
  uint32_t imm = 0;          // immediate data, host order
};

inline constexpr uint32_t kMaxSges = 4;
inline constexpr uint32_t kMaxInline = 256;

std::vector<Message> make_plan(const PhaseSpec& spec, uint64_t seed, uint32_t phase, Role issuer,
                               uint32_t qp, uint64_t exposed_bytes);

// A piece of a gather/scatter list: message bytes [msg_offset, +length) live at
// buffer offset mem_offset.
struct Piece {
  uint32_t msg_offset = 0;
  uint32_t mem_offset = 0;
  uint32_t length = 0;
};
struct Sgl {
  std::array<Piece, kMaxSges> piece{};
  uint32_t count = 0;
};
// Splits a buffer of `total` bytes into `count` pieces (fewer if total is smaller)
// at points drawn from `salt`; the pieces sit in the buffer in reverse order, so a
// scatter list is never just one contiguous run.
Sgl split_buffer(uint32_t total, uint32_t count, uint64_t salt);

// The content key of role `owner`'s exposed region (read by the peer's READs), and
// the initial value of the atomic slot a QP's peer operates on.
uint64_t exposed_key(uint64_t seed, Role owner);
uint64_t atomic_initial(uint64_t seed, Role owner, uint32_t qp);

// Phase lists. `scale` multiplies message counts (at least 1 message each).
struct PhaseListOptions {
  uint32_t max_size = 8u << 20;
  double scale = 1.0;
  uint32_t depth = 8;
  Transport transport = Transport::kRc;
  uint32_t mtu = 4096;  // UD: no message is longer than the path MTU
};
std::vector<PhaseSpec> demo_phases(const PhaseListOptions& o);
std::vector<PhaseSpec> test_phases(const PhaseListOptions& o);
// "SEND" ops in a custom run: one mixed phase of exactly these ops.
std::vector<PhaseSpec> custom_phases(const PhaseListOptions& o, const std::vector<Op>& ops,
                                     uint32_t messages);

// The phases with the ops the transport lacks taken out (phases left with none are
// dropped) and, for UD, message sizes capped at the path MTU.
std::vector<PhaseSpec> restrict_to_transport(std::vector<PhaseSpec> phases,
                                             const PhaseListOptions& o);

std::string size_label(uint64_t bytes);  // "64B", "64KiB", "8MiB", "1.5MiB"

}  // namespace softrdma::traffic
