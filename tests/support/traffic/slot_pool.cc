#include "traffic/slot_pool.h"

#include <algorithm>
#include <cstring>

#include "traffic/content.h"

namespace softrdma::traffic {

namespace {

constexpr uint64_t kSlotSglSalt = 0x510750;

// Calls fn(piece, begin, end) for the logical bytes [begin, end) of each piece
// that meets [offset, offset + length).
template <typename Fn>
void for_range(const Sgl& sgl, uint32_t offset, uint32_t length, Fn&& fn) {
  const uint32_t stop = offset + length;
  for (uint32_t i = 0; i < sgl.count; ++i) {
    const Piece& p = sgl.piece[i];
    const uint32_t begin = std::max(offset, p.msg_offset);
    const uint32_t end = std::min(stop, p.msg_offset + p.length);
    if (begin < end) fn(p, begin, end);
  }
}

}  // namespace

SlotPool::SlotPool(const SlotPoolSetup& setup) : setup_(setup), sgl_(setup.slots) {
  // Slot k has 1 + k % kMaxSges pieces: scatter lists of every length are used.
  for (uint32_t k = 0; k < setup_.slots; ++k)
    sgl_[k] = split_buffer(setup_.slot_bytes, 1 + k % kMaxSges, kSlotSglSalt + k);
}

void SlotPool::poison(uint32_t slot, uint32_t length) {
  uint8_t* base = slot_base(slot);
  for_range(sgl_[slot], 0, std::min(length, setup_.slot_bytes),
            [&](const Piece& p, uint32_t begin, uint32_t end) {
              fill_content(setup_.poison_key, begin,
                           {base + p.mem_offset + (begin - p.msg_offset), end - begin});
            });
}

bool SlotPool::post(uint32_t slot) {
  uint8_t* base = slot_base(slot);
  const Sgl& sgl = sgl_[slot];
  ibv_sge sge[kMaxSges];
  for (uint32_t i = 0; i < sgl.count; ++i)
    sge[i] = ibv_sge{reinterpret_cast<uint64_t>(base + sgl.piece[i].mem_offset),
                     sgl.piece[i].length, setup_.buffers->key()};
  ibv_recv_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = sge;
  wr.num_sge = int(sgl.count);
  ibv_recv_wr* bad = nullptr;
  const int rc = setup_.srq != nullptr ? ibv_post_srq_recv(setup_.srq, &wr, &bad)
                                       : ibv_post_recv(setup_.qp, &wr, &bad);
  if (rc != 0) {
    setup_.errors->fatal(std::string(setup_.srq ? "ibv_post_srq_recv" : "ibv_post_recv") +
                         " of slot " + std::to_string(slot) + " failed: " + std::strerror(rc));
    return false;
  }
  return true;
}

bool SlotPool::post_all() {
  for (uint32_t k = 0; k < setup_.slots; ++k) {
    poison(k, setup_.slot_bytes);
    if (!post(k)) return false;
  }
  return true;
}

bool SlotPool::repost(uint32_t slot, uint32_t dirty) {
  poison(slot, dirty);
  return post(slot);
}

void SlotPool::copy_out(uint32_t slot, uint32_t offset, std::span<uint8_t> out) const {
  const uint8_t* base = slot_base(slot);
  for_range(sgl_[slot], offset, uint32_t(out.size()),
            [&](const Piece& p, uint32_t begin, uint32_t end) {
              std::memcpy(out.data() + (begin - offset),
                          base + p.mem_offset + (begin - p.msg_offset), end - begin);
            });
}

bool SlotPool::is_poison(uint32_t slot, uint32_t offset, uint32_t length) const {
  length = std::min(length, setup_.slot_bytes - std::min(offset, setup_.slot_bytes));
  std::vector<uint8_t> got(length);
  copy_out(slot, offset, got);
  return first_mismatch(setup_.poison_key, offset, got) == kNoMismatch;
}

}  // namespace softrdma::traffic
