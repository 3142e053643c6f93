// Receive buffers that are not made for one expected message: fixed-size slots,
// each posted as one receive WQE (wr_id = slot number) with its own scatter list,
// on a QP's receive queue (UC, UD: a WQE may be taken by any message, or by none
// when a message is lost) or on a shared receive queue (SRQ: the WQE goes to
// whichever QP's message comes first). The receiver identifies each message from
// its completion (arrivals.h).
//
// Every slot is poisoned (contents of `poison_key`, by position in the slot)
// before it is posted, so bytes the device did not write are recognisable: after
// a message is checked only the bytes it covered are poisoned again.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "traffic/buffers.h"
#include "traffic/plan.h"
#include "traffic/stats.h"

namespace softrdma::traffic {

struct SlotPoolSetup {
  ibv_qp* qp = nullptr;    // the QP's own receive queue, or
  ibv_srq* srq = nullptr;  // the shared receive queue
  Region* buffers = nullptr;
  uint32_t slot_bytes = 0;  // a multiple of 64
  uint32_t slots = 0;
  uint64_t poison_key = 0;
  ErrorLog* errors = nullptr;
};

class SlotPool {
 public:
  explicit SlotPool(const SlotPoolSetup& setup);
  // Poisons every slot and posts it. False on a failed post (fatal, logged).
  bool post_all();
  // Poisons the slot's first `dirty` bytes again and posts it.
  bool repost(uint32_t slot, uint32_t dirty);
  uint32_t slots() const { return setup_.slots; }
  uint32_t slot_bytes() const { return setup_.slot_bytes; }
  // Copies the slot's logical bytes [offset, offset + out.size()) (through its
  // scatter list) into `out`.
  void copy_out(uint32_t slot, uint32_t offset, std::span<uint8_t> out) const;
  // True when the slot's logical bytes [offset, offset + length) are still poison.
  bool is_poison(uint32_t slot, uint32_t offset, uint32_t length) const;

 private:
  bool post(uint32_t slot);
  void poison(uint32_t slot, uint32_t length);
  uint8_t* slot_base(uint32_t slot) const {
    return setup_.buffers->data() + uint64_t(slot) * setup_.slot_bytes;
  }

  const SlotPoolSetup setup_;
  std::vector<Sgl> sgl_;  // per slot: pieces in reverse memory order (plan.h)
};

}  // namespace softrdma::traffic
