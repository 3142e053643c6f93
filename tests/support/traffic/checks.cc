#include "traffic/checks.h"

#include <algorithm>

#include "traffic/content.h"

namespace softrdma::traffic {

Encoder encode(const CheckRequest& r) {
  Encoder e;
  e.u32(r.phase).u32(r.qp).u32(r.epoch).u32(uint32_t(r.items.size()));
  for (const CheckItem& i : r.items)
    e.u8(uint8_t(i.kind)).u32(i.message).u64(i.offset).u32(i.length).u64(i.key).u64(i.key_offset);
  return e;
}

Encoder encode(const CheckReply& r) {
  Encoder e;
  e.u32(r.phase).u32(r.qp).u32(r.epoch).u64(r.atomic_slot).u32(uint32_t(r.results.size()));
  for (const CheckResult& c : r.results) e.u32(c.crc).u64(c.mismatch).u8(c.lost ? 1 : 0);
  return e;
}

bool decode(std::span<const uint8_t> payload, CheckRequest& out) {
  Decoder d(payload);
  out.phase = d.u32();
  out.qp = d.u32();
  out.epoch = d.u32();
  const uint32_t n = d.u32();
  if (!d.ok() || n > payload.size()) return false;
  out.items.resize(n);
  for (CheckItem& i : out.items) {
    i.kind = CheckKind(d.u8());
    i.message = d.u32();
    i.offset = d.u64();
    i.length = d.u32();
    i.key = d.u64();
    i.key_offset = d.u64();
  }
  return d.ok() && d.at_end();
}

bool decode(std::span<const uint8_t> payload, CheckReply& out) {
  Decoder d(payload);
  out.phase = d.u32();
  out.qp = d.u32();
  out.epoch = d.u32();
  out.atomic_slot = d.u64();
  const uint32_t n = d.u32();
  if (!d.ok() || n > payload.size()) return false;
  out.results.resize(n);
  for (CheckResult& c : out.results) {
    c.crc = d.u32();
    c.mismatch = d.u64();
    c.lost = d.u8() != 0;
  }
  return d.ok() && d.at_end();
}

namespace {

// Every packet of the WRITE at `bytes` (landing offset `offset`) is either the
// message's contents or the poison, untouched: the message was lost on the way
// (UC drops the rest of a message once a packet is missing, uc.md).
bool lost_whole_packets(const CheckItem& item, std::span<const uint8_t> bytes,
                        const LandingPoison& poison) {
  for (uint64_t at = 0; at < bytes.size(); at += poison.packet_bytes) {
    const auto packet = bytes.subspan(at, std::min<uint64_t>(poison.packet_bytes, bytes.size() - at));
    if (first_mismatch(item.key, item.key_offset + at, packet) == kNoMismatch) continue;
    if (first_mismatch(poison.key, item.offset + at, packet) != kNoMismatch) return false;
  }
  return true;
}

}  // namespace

CheckReply answer_check(const CheckRequest& request, std::span<const uint8_t> landing,
                        std::span<const uint8_t> exposed, uint64_t atomic_slot,
                        const LandingPoison* poison) {
  CheckReply reply;
  reply.phase = request.phase;
  reply.qp = request.qp;
  reply.epoch = request.epoch;
  reply.atomic_slot = atomic_slot;
  reply.results.reserve(request.items.size());
  for (const CheckItem& item : request.items) {
    const std::span<const uint8_t> region = item.kind == CheckKind::kWrite ? landing : exposed;
    CheckResult r{0, 0};
    if (item.offset <= region.size() && item.length <= region.size() - item.offset) {
      const auto bytes = region.subspan(item.offset, item.length);
      const size_t bad = first_mismatch(item.key, item.key_offset, bytes);
      r.mismatch = bad == kNoMismatch ? ~uint64_t(0) : uint64_t(bad);
      r.crc = crc32_of(bytes);
      if (bad != kNoMismatch && poison != nullptr && item.kind == CheckKind::kWrite)
        r.lost = lost_whole_packets(item, bytes, *poison);
    }
    reply.results.push_back(r);
  }
  return reply;
}

}  // namespace softrdma::traffic
