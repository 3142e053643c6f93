// The receiving side of one QP when its receive WQEs are slots of a SlotPool
// (UC, UD, SRQ): each receive completion is matched with the peer's plan for the
// QP (which messages consume a receive WQE, in order) and checked: status, opcode,
// qp_num, src_qp, byte_len, immediate data, every byte of the message, that the
// bytes past it are still poison (not on UC, arrivals.cc), and on UD the GRH's
// addresses (ud.md: 40 bytes at the start of the buffer).
//
// SRQ (reliable): the completion must be the next message of the QP's plan.
// UC, UD: messages may be lost, so the completion is the first message from the
// next expected one on whose length, immediate data and bytes it agrees; those
// it skipped are lost. A marker (0-byte SEND with immediate, lane.h) closes a
// round: every message the peer had posted before it and that has not arrived is
// lost. A message may still come after a later one or after its round was closed
// (reordered: UD has no order, and a UC responder starts a new message at any
// FIRST or ONLY packet whatever its PSN, uc.md): it is then counted late
// (received, no longer lost); one that arrives twice (a duplicated packet) is a
// duplicate, checked but not counted twice.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "traffic/fabric.h"
#include "traffic/marker.h"
#include "traffic/plan.h"
#include "traffic/slot_pool.h"
#include "traffic/stats.h"

namespace softrdma::traffic {

inline constexpr uint32_t kGrhBytes = 40;  // IBA 11.4.1.2, ud.md

struct ArrivalsSetup {
  Transport transport = Transport::kUc;
  uint32_t qp_index = 0;
  uint32_t qp_num = 0;
  uint32_t peer_qpn = 0;  // what wc.src_qp must say
  Gid local_gid{}, peer_gid{};
  ErrorLog* errors = nullptr;
  Verified* verified = nullptr;
  bool spoil_first_send = false;  // tests of the checks: flip a byte of the first SEND
};

class Arrivals {
 public:
  explicit Arrivals(const ArrivalsSetup& setup) : setup_(setup) {}

  void start_phase(uint32_t phase, const std::vector<Message>& peer_plan);
  // A receive completion of this QP, its buffer slot `slot` of `pool` (not yet
  // reposted). Returns the marker's tag when it was a marker of this phase.
  std::optional<MarkerTag> on_completion(const ibv_wc& wc, const SlotPool& pool,
                                             uint32_t slot);
  // UC, UD: the peer's marker of `round` says it posted `consumed_low` (low 16
  // bits) consuming messages: those not arrived are lost. False for a repeated
  // marker of a round already closed.
  bool close_round(uint32_t round, uint32_t consumed_low);
  // The marker says the peer posted all the messages of the phase.
  bool is_last_round(uint32_t consumed_low) const {
    return (expected_.size() & MarkerTag::kConsumedMask) == consumed_low &&
           expected_.size() - next_ <= MarkerTag::kConsumedMask;
  }
  bool done() const { return resolved_ == expected_.size(); }
  std::string describe() const;

 private:
  enum class Fate : uint8_t { kPending, kReceived, kLost };

  bool agrees(const Message& m, const ibv_wc& wc, const std::vector<uint8_t>& payload) const;
  void check_reliable(const Message& m, const ibv_wc& wc, const std::vector<uint8_t>& payload);
  void match_unreliable(const ibv_wc& wc, const std::vector<uint8_t>& payload);
  void check_grh(const SlotPool& pool, uint32_t slot);
  void received(size_t index, const std::vector<uint8_t>& payload);
  std::string where(const Message& m) const;

  const ArrivalsSetup setup_;
  uint32_t phase_ = 0;
  std::vector<Message> expected_;  // the peer's messages that consume a receive WQE
  std::vector<Fate> fate_;
  size_t next_ = 0;      // the first message that may still arrive in order
  size_t resolved_ = 0;  // received or lost
  uint32_t rounds_closed_ = 0;
  bool send_spoiled_ = false;
};

}  // namespace softrdma::traffic
