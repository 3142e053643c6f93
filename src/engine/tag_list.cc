#include "engine/tag_list.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace softrdma::engine {

namespace {

uint64_t big_endian(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

// tm_types.h: struct ibv_tmh { opcode; reserved[3]; __be32 app_ctx; __be64 tag; }
// then, for IBV_TMH_RNDV, struct ibv_rvh { __be64 va; __be32 rkey; __be32 len; }.
bool parse_tm_header(std::span<const uint8_t> m, TmHeader& out) {
  if (m.size() < kTmhBytes) return false;
  out = TmHeader{};
  out.opcode = m[0];
  out.app_ctx = uint32_t(big_endian(&m[4], 4));
  out.tag = big_endian(&m[8], 8);
  const size_t kept = std::min<size_t>(m.size(), out.raw.size());
  std::memcpy(out.raw.data(), m.data(), kept);
  if (out.opcode == IBV_TMH_RNDV && m.size() >= kTmhBytes + kRvhBytes) {
    out.has_rvh = true;
    out.va = big_endian(&m[16], 8);
    out.rkey = uint32_t(big_endian(&m[24], 4));
    out.len = uint32_t(big_endian(&m[28], 4));
  }
  return true;
}

std::array<uint8_t, kTmhBytes + kRvhBytes> make_fin(const TmHeader& request) {
  std::array<uint8_t, kTmhBytes + kRvhBytes> fin = request.raw;
  fin[0] = IBV_TMH_FIN;
  return fin;
}

TagList::TagList(uint32_t max_tags, uint32_t max_sge) : max_sge_(max_sge), entries_(max_tags) {
  for (uint32_t h = 0; h < max_tags; ++h) free_.push_back(h);
  order_.reserve(max_tags);
}

int TagList::add(const ibv_ops_wr& wr, uint32_t& handle) {
  const int num_sge = wr.tm.add.num_sge;
  if (num_sge < 0 || uint32_t(num_sge) > max_sge_ || (num_sge > 0 && wr.tm.add.sg_list == nullptr))
    return EINVAL;
  if (free_.empty()) return ENOMEM;  // mlx5: "tag matching list is full"
  handle = free_.front();
  free_.pop_front();
  TagEntry& e = entries_[handle];
  e.tag = wr.tm.add.tag;
  e.mask = wr.tm.add.mask;
  e.recv_wr_id = wr.tm.add.recv_wr_id;
  e.sges.clear();
  e.length = 0;
  for (int i = 0; i < num_sge; ++i) {
    const ibv_sge& s = wr.tm.add.sg_list[i];
    e.sges.push_back(Sge{s.addr, s.length, s.lkey});
    e.length += s.length;
  }
  e.in_use = true;
  e.armed = in_sync();
  order_.push_back(handle);
  return 0;
}

bool TagList::del(uint32_t handle) {
  if (handle >= entries_.size() || !entries_[handle].in_use) return false;
  release(handle);
  return true;
}

// Once software has handled every unexpected message, the entries it added
// meanwhile were added knowing of them all: they may match.
void TagList::sync(uint32_t count) {
  sw_unexpected_ = count;
  if (!in_sync()) return;
  for (uint32_t h : order_) entries_[h].armed = true;
}

std::optional<uint32_t> TagList::match(uint64_t tag) const {
  for (uint32_t h : order_) {
    const TagEntry& e = entries_[h];
    if (e.armed && (tag & e.mask) == (e.tag & e.mask)) return h;
  }
  return std::nullopt;
}

TagEntry TagList::take(uint32_t handle) {
  TagEntry taken = std::move(entries_[handle]);
  release(handle);
  return taken;
}

// A freed handle goes to the back of the FIFO: a DEL naming a handle whose entry
// a message just consumed finds it free (IBV_WC_TM_ERR) rather than a newer
// entry, unless every other handle was reused since.
void TagList::release(uint32_t handle) {
  entries_[handle] = TagEntry{};
  order_.erase(std::find(order_.begin(), order_.end(), handle));
  free_.push_back(handle);
}

}  // namespace softrdma::engine
