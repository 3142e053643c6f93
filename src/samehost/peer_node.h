// A peer's side of another process's node segment (node_segment.h;
// docs/decisions/same-host.md): found by GID, mapped, and used for the accesses a
// process makes as the owner's RNIC.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>

#include "samehost/node_segment.h"

namespace softrdma::samehost {

// A peer's view of another process's segment.
class PeerNode {
 public:
  // Opens the segment of `gid` (with `block`, of the process holding that QPN
  // block of a shared address): null when no softrdma process of this user serves
  // it (the wire then carries the traffic), with why (empty: nobody serves it).
  static std::unique_ptr<PeerNode> open(const Gid& gid, std::string& why,
                                        const std::string& directory = kNodeDirectory,
                                        uint32_t block = 0);
  ~PeerNode();
  PeerNode(const PeerNode&) = delete;
  PeerNode& operator=(const PeerNode&) = delete;

  pid_t pid() const { return pid_; }
  // The segment file's identity: one per process, whichever of its names opened it.
  std::pair<dev_t, ino_t> file() const { return file_; }
  uint64_t probe_addr() const { return probe_addr_; }
  uint64_t probe_value() const { return probe_value_; }
  bool serving() const { return view_.header->serving.load(std::memory_order_acquire) != 0; }
  bool key_overflow() const { return view_.header->key_overflow.load(std::memory_order_acquire); }
  std::optional<KeyGrant> key(uint32_t rkey) const;
  std::optional<QpGrant> qp(uint32_t qpn) const;
  std::optional<SrqGrant> xrc_srq(uint32_t srqn) const;
  NodeHeader& header() { return *view_.header; }

  // Claims a peer slot for this process; false when every slot is taken.
  bool join();
  // Brackets every access through a key: between them, the owner's revoke_key
  // waits (the key must be looked up after begin_access()).
  void begin_access();
  void end_access();
  // Reports that acting for the owner's QP `qpn` failed with `event`; false when
  // the owner's queue is full (it is then told nothing: its QP lives on).
  bool report_fault(uint32_t qpn, uint32_t event);
  // The receive queue a QpGrant names (its recv_queue), null for none or garbage.
  RecvState* recv(uint32_t recv_queue) const;
  // That queue's kSharedSges scatter entries in the segment (RecvState::shared_sges).
  const RecvSge* recv_sges(uint32_t recv_queue) const;
  // Where that queue's peers write its WQEs' results (RecvState::shared_sges).
  RecvResult* recv_results(uint32_t recv_queue) const;
  // Tells the owner that `recv_queue` has placed WQEs; true when the owner must be
  // woken (no notice of that queue was waiting yet).
  bool notice(uint32_t recv_queue);

 private:
  PeerNode() = default;

  NodeView view_;
  PeerSlot* slot_ = nullptr;
  pid_t pid_ = 0;
  std::pair<dev_t, ino_t> file_{};
  uint64_t probe_addr_ = 0;
  uint64_t probe_value_ = 0;
};

}  // namespace softrdma::samehost
