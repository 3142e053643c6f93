// Verification of one-sided operations across the two processes.
//
// Only the target sees what an RDMA WRITE left in its memory, and only the target
// can hash the memory a READ was served from. So at the end of every epoch of a
// lane (when its landing space is used up, and at the end of a phase) the requester
// sends the list of ranges it wrote or read with the CRC-32 of its own side; the
// target compares each range byte for byte with the contents it can regenerate,
// hashes it, and returns the hashes and its atomic slot's value; the requester
// compares. Both processes thus check every byte.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "traffic/oob.h"

namespace softrdma::traffic {

enum class CheckKind : uint8_t { kWrite = 1, kRead = 2 };

struct CheckItem {
  CheckKind kind = CheckKind::kWrite;
  uint32_t message = 0;  // index in the requester's plan (for messages)
  uint64_t offset = 0;   // into the target's landing (WRITE) or exposed (READ) region
  uint32_t length = 0;
  uint64_t key = 0;         // content key of the bytes (WRITE: the message's; READ: exposed)
  uint64_t key_offset = 0;  // content position of the first byte
};

struct CheckRequest {
  uint32_t phase = 0;
  uint32_t qp = 0;
  uint32_t epoch = 0;
  std::vector<CheckItem> items;
};

struct CheckResult {
  uint32_t crc = 0;
  uint64_t mismatch = 0;  // offset of the first wrong byte, or ~0 when all match
  // UC only: the range is not complete, but each of its packets either arrived
  // whole or left the landing region's poison untouched (a message lost on the way).
  bool lost = false;
};

// UC landing regions: before any WRITE, the target fills its landing region with
// contents of `key` (the poison), so a packet that never arrived is recognisable.
// A UC WRITE is cut into `packet_bytes` (path MTU) packets from its first byte.
struct LandingPoison {
  uint64_t key = 0;
  uint32_t packet_bytes = 4096;
};

struct CheckReply {
  uint32_t phase = 0;
  uint32_t qp = 0;
  uint32_t epoch = 0;
  uint64_t atomic_slot = 0;  // the target's slot for this QP, now
  std::vector<CheckResult> results;
};

Encoder encode(const CheckRequest& r);
Encoder encode(const CheckReply& r);
bool decode(std::span<const uint8_t> payload, CheckRequest& out);
bool decode(std::span<const uint8_t> payload, CheckReply& out);

// The target's side: checks and hashes the ranges of `landing` / `exposed`.
// Ranges outside the regions are answered with mismatch 0 and crc 0 (they fail).
// With `poison` (UC), an incomplete WRITE range whose every packet is either whole
// or untouched poison is answered `lost`; the caller re-poisons the ranges after.
CheckReply answer_check(const CheckRequest& request, std::span<const uint8_t> landing,
                        std::span<const uint8_t> exposed, uint64_t atomic_slot,
                        const LandingPoison* poison = nullptr);

}  // namespace softrdma::traffic
