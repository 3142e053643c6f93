// The tag matching list of a TM SRQ (ibv_create_srq_ex(3) IBV_SRQT_TM,
// ibv_post_srq_ops(3); rdma-core's Documentation/tag_matching.md), and the
// headers a tag-matching message begins with (<infiniband/tm_types.h>).
//
// Owner: the device's engine. List operations run with the engine held
// (Srq::post_ops), matching runs in the engine's turn, so the two are serialised
// as an RNIC serialises its command queue and its receive pipeline.
// docs/decisions/tag-matching.md.
#pragma once

#include <infiniband/tm_types.h>
#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "engine/wqe.h"

namespace softrdma::engine {

inline constexpr uint32_t kTmhBytes = sizeof(ibv_tmh);  // 16
inline constexpr uint32_t kRvhBytes = sizeof(ibv_rvh);  // 16

// A TMH (and, for a rendezvous request, the RVH after it) read from the start of
// a message; multi-byte fields are big-endian on the wire (tm_types.h).
struct TmHeader {
  uint8_t opcode = IBV_TMH_NO_TAG;  // enum ibv_tmh_op
  uint32_t app_ctx = 0;
  uint64_t tag = 0;
  bool has_rvh = false;  // RNDV with the RVH present
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t len = 0;
  // TMH and RVH as received: a FIN sends them back (opcode changed), an
  // IBV_WC_TM_RNDV_INCOMPLETE scatters them into the tagged buffer.
  std::array<uint8_t, kTmhBytes + kRvhBytes> raw{};
};

// False when the message is shorter than a TMH.
bool parse_tm_header(std::span<const uint8_t> message_start, TmHeader& out);
// The 32 bytes of a FIN answering rendezvous request `request` (tag_matching.md:
// "a copy of the original TMH and RVH of the rendezvous request, apart the opcode").
std::array<uint8_t, kTmhBytes + kRvhBytes> make_fin(const TmHeader& request);

// What a TM SRQ made of the message a QP is receiving (Qp::take_tm_recv).
enum class TmKind : uint8_t {
  kNone,        // not a TM SRQ's message (or an RDMA WRITE with immediate)
  kUnexpected,  // no armed tag matched: the whole message into an ordinary WQE
  kNoTag,       // IBV_TMH_NO_TAG: the whole message into an ordinary WQE
  kEager,       // matched: the payload after the TMH into the tagged buffer
  kRendezvous,  // matched: an RDMA READ of the sender's buffer into the tagged buffer
};

struct TmMessage {
  TmKind kind = TmKind::kNone;
  TmHeader header;
  // An eager message of several packets: the IBV_WC_TM_MATCH completion went out
  // at its first packet; its last brings IBV_WC_TM_DATA_VALID (tag_matching.md).
  bool match_reported = false;
};

// A tagged buffer: the list entry an IBV_WR_TAG_ADD made.
struct TagEntry {
  uint64_t tag = 0;
  uint64_t mask = 0;
  uint64_t recv_wr_id = 0;
  std::vector<Sge> sges;
  uint64_t length = 0;  // sum of the SGEs
  bool in_use = false;
  // Added while hardware and software agreed on the unexpected count: only such
  // entries match (tag_matching.md: "whenever HW deems a message unexpected, tag
  // matching must be disabled for new tags until SW and HW synchronize").
  bool armed = false;
};

class TagList {
 public:
  TagList(uint32_t max_tags, uint32_t max_sge);

  // IBV_WR_TAG_ADD: EINVAL for an SGE list beyond max_sge, ENOMEM when the list
  // is full; else the entry's handle.
  int add(const ibv_ops_wr& wr, uint32_t& handle);
  // IBV_WR_TAG_DEL: false when `handle` holds no entry (consumed by a message,
  // or deleted): IBV_WC_TM_ERR. The handle must be below capacity() (EINVAL is
  // the poster's answer before this).
  bool del(uint32_t handle);
  // IBV_OPS_TM_SYNC: software has handled `count` unexpected messages.
  void sync(uint32_t count);
  uint32_t capacity() const { return uint32_t(entries_.size()); }
  bool in_sync() const { return sw_unexpected_ == hw_unexpected_; }

  // Matching (engine owner): the oldest armed entry whose tag & mask equals the
  // message's tag & mask (ibv_post_srq_ops(3): "TMH.tag & entry.mask ==
  // entry.tag"), taken out of the list; nullopt when none.
  std::optional<uint32_t> match(uint64_t tag) const;
  TagEntry take(uint32_t handle);
  // The message was delivered as unexpected: matching of entries added from now
  // on waits until software reports having handled it (sync).
  void count_unexpected() { ++hw_unexpected_; }
  uint32_t unexpected() const { return hw_unexpected_; }

 private:
  void release(uint32_t handle);

  const uint32_t max_sge_;
  std::vector<TagEntry> entries_;
  std::deque<uint32_t> free_;    // handles free, oldest freed first (reused late)
  std::vector<uint32_t> order_;  // handles in use, in the order they were added
  uint32_t hw_unexpected_ = 0;   // messages delivered unexpected
  uint32_t sw_unexpected_ = 0;   // the count software last reported
};

}  // namespace softrdma::engine
