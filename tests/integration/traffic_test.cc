// Unit tests of the traffic oracle's own pieces (tests/support/traffic): the arena that
// hands out buffers, scatter/gather splits, generated contents, plans and what
// each transport may carry, the cross-process check messages (with UC's lost
// ranges), the markers that end a round, and the report records. The two-process runs
// rely on every one of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <set>
#include <vector>

#include "traffic/buffers.h"
#include "traffic/checks.h"
#include "traffic/content.h"
#include "traffic/marker.h"
#include "traffic/plan.h"
#include "traffic/report.h"

namespace softrdma::traffic {
namespace {

// Allocations stay inside the arena and never overlap a live one, including when
// the tail reaches the end exactly (then the next one starts at 0).
TEST(FifoArena, AllocationsStayInBoundsAndDisjoint) {
  constexpr uint64_t kCapacity = 17 * 64 * 1024;
  FifoArena arena(kCapacity);
  std::deque<std::pair<uint64_t, uint64_t>> live;  // offset, length
  Rng rng(7);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t len = i % 3 == 0 ? 65536 : 1 + rng.below(100000);
    std::optional<uint64_t> at = arena.alloc(len);
    if (!at) {
      ASSERT_FALSE(live.empty()) << "an empty arena refused " << len << " bytes";
      arena.free_oldest();
      live.pop_front();
      continue;
    }
    ASSERT_LE(*at + len, kCapacity) << "allocation " << i << " runs past the end";
    for (const auto& [o, l] : live) ASSERT_TRUE(*at + len <= o || o + l <= *at) << "overlap";
    live.emplace_back(*at, len);
  }
}

TEST(FifoArena, ExactFitThenWrap) {
  FifoArena arena(4 * 64);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(arena.alloc(64), std::optional<uint64_t>(64 * i));
  EXPECT_FALSE(arena.alloc(1));
  arena.free_oldest();
  EXPECT_EQ(arena.alloc(64), std::optional<uint64_t>(0));  // the tail was at the very end
}

// A split covers the message exactly once, and the pieces tile the buffer.
TEST(SplitBuffer, PiecesTileMessageAndBuffer) {
  for (uint32_t total : {1u, 2u, 3u, 5u, 100u, 65536u}) {
    for (uint32_t count = 1; count <= kMaxSges; ++count) {
      const Sgl sgl = split_buffer(total, count, total * 31 + count);
      ASSERT_GE(sgl.count, 1u);
      ASSERT_LE(sgl.count, std::min(count, total));
      uint32_t msg = 0;
      std::vector<std::pair<uint32_t, uint32_t>> mem;
      for (uint32_t i = 0; i < sgl.count; ++i) {
        EXPECT_EQ(sgl.piece[i].msg_offset, msg);
        EXPECT_GT(sgl.piece[i].length, 0u);
        msg += sgl.piece[i].length;
        mem.emplace_back(sgl.piece[i].mem_offset, sgl.piece[i].length);
      }
      EXPECT_EQ(msg, total);
      std::sort(mem.begin(), mem.end());
      uint32_t at = 0;
      for (const auto& [o, l] : mem) {
        EXPECT_EQ(o, at);
        at += l;
      }
      EXPECT_EQ(at, total);
    }
  }
}

// Any window of the contents can be made alone, and a flipped byte anywhere is found.
TEST(Content, WindowsAgreeAndMismatchesAreFound) {
  std::vector<uint8_t> whole(1000);
  fill_content(42, 0, whole);
  for (uint64_t off : {0u, 1u, 7u, 8u, 13u, 500u}) {
    std::vector<uint8_t> part(300);
    fill_content(42, off, part);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + off));
    EXPECT_EQ(first_mismatch(42, off, part), kNoMismatch);
    for (size_t bad : {size_t(0), size_t(5), size_t(8), size_t(299)}) {
      part[bad] ^= 0x10;
      EXPECT_EQ(first_mismatch(42, off, part), bad);
      part[bad] ^= 0x10;
    }
  }
  std::vector<uint8_t> other(300);
  fill_content(43, 0, other);
  EXPECT_NE(first_mismatch(42, 0, other), kNoMismatch);
}

// Both processes compute the same plans; the test mix has one max-size message of
// every non-atomic op on the client's QP 0; sizes stay in range.
TEST(Plan, DeterministicAndComplete) {
  const std::vector<PhaseSpec> phases = test_phases(PhaseListOptions{});
  const PhaseSpec& mix = phases[0];
  const auto a = make_plan(mix, 5, 0, Role::kClient, 0, 9u << 20);
  const auto b = make_plan(mix, 5, 0, Role::kClient, 0, 9u << 20);
  ASSERT_EQ(a.size(), b.size());
  std::set<Op> at_max;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].op, b[i].op);
    EXPECT_EQ(a[i].length, b[i].length);
    EXPECT_EQ(a[i].key, b[i].key);
    if (op_info(a[i].op).atomic) {
      EXPECT_EQ(a[i].length, 8u);
    } else {
      EXPECT_GE(a[i].length, mix.min_size);
      EXPECT_LE(a[i].length, mix.max_size);
      EXPECT_LE(a[i].read_offset + a[i].length, 9u << 20);
    }
    if (a[i].length == mix.max_size) at_max.insert(a[i].op);
  }
  for (Op op : {Op::kSend, Op::kSendImm, Op::kWrite, Op::kWriteImm, Op::kRead})
    EXPECT_TRUE(at_max.count(op)) << op_info(op).name;
  EXPECT_TRUE(
      make_plan(demo_phases(PhaseListOptions{})[0], 5, 0, Role::kServer, 0, 1 << 20).empty())
      << "single-op demo phases are client-only";
}

TEST(Checks, RoundTripAndTargetFindsWrongBytes) {
  std::vector<uint8_t> landing(4096), exposed(4096);
  fill_content(9, 0, {landing.data() + 100, 200});
  fill_content(11, 0, exposed);
  CheckRequest req{3,
                   1,
                   2,
                   {{CheckKind::kWrite, 7, 100, 200, 9, 0},
                    {CheckKind::kRead, 8, 50, 300, 11, 50},
                    {CheckKind::kWrite, 9, 4000, 200, 9, 0}}};  // out of bounds
  CheckRequest decoded;
  ASSERT_TRUE(decode(encode(req).data(), decoded));
  ASSERT_EQ(decoded.items.size(), 3u);
  EXPECT_EQ(decoded.items[1].key_offset, 50u);
  landing[100 + 17] ^= 1;
  const CheckReply reply = answer_check(decoded, landing, exposed, 77);
  CheckReply back;
  ASSERT_TRUE(decode(encode(reply).data(), back));
  EXPECT_EQ(back.atomic_slot, 77u);
  EXPECT_EQ(back.results[0].mismatch, 17u);
  EXPECT_EQ(back.results[1].mismatch, ~uint64_t(0));
  EXPECT_EQ(back.results[1].crc, crc32_of({exposed.data() + 50, 300}));
  EXPECT_EQ(back.results[2].mismatch, 0u);
  // A truncated message does not decode.
  std::vector<uint8_t> cut = encode(req).data();
  cut.pop_back();
  EXPECT_FALSE(decode(cut, decoded));
}

// UC: a WRITE range whose packets are each whole or untouched poison was lost on
// the way; one with a packet that is neither is wrong, not lost.
TEST(Checks, UcRangeOfWholeOrUntouchedPacketsIsLost) {
  const LandingPoison poison{123, 256};
  std::vector<uint8_t> landing(4096);
  fill_content(poison.key, 0, landing);
  fill_content(9, 0, {landing.data(), 512});  // packets 0 and 1 of 4 arrived
  fill_content(10, 0, {landing.data() + 1024, 1024});  // a whole message
  fill_content(11, 0, {landing.data() + 2048, 256});   // packet 0 arrived...
  landing[2048 + 256 + 3] ^= 1;                        // ...packet 1 is neither
  const CheckRequest req{0, 0, 0,
                         {{CheckKind::kWrite, 0, 0, 1024, 9, 0},
                          {CheckKind::kWrite, 1, 1024, 1024, 10, 0},
                          {CheckKind::kWrite, 2, 2048, 1024, 11, 0}}};
  const CheckReply reply = answer_check(req, landing, {}, 0, &poison);
  EXPECT_TRUE(reply.results[0].lost);
  EXPECT_FALSE(reply.results[1].lost);
  EXPECT_EQ(reply.results[1].mismatch, ~uint64_t(0));
  EXPECT_FALSE(reply.results[2].lost);
  EXPECT_NE(reply.results[2].mismatch, ~uint64_t(0));
  // Without the poison (RC) an incomplete range is an error, never lost.
  EXPECT_FALSE(answer_check(req, landing, {}, 0).results[0].lost);
  CheckReply back;
  ASSERT_TRUE(decode(encode(reply).data(), back));
  EXPECT_TRUE(back.results[0].lost);
}

// UC has no READ or atomics, UD only SENDs no longer than the MTU; a phase left
// with no op is dropped, and forced max-size messages use only what remains.
TEST(Plan, PhasesKeepOnlyWhatTheTransportOffers) {
  PhaseListOptions o;
  o.transport = Transport::kUd;
  o.mtu = 1024;
  const auto ud = restrict_to_transport(demo_phases(o), o);
  ASSERT_FALSE(ud.empty());
  for (const PhaseSpec& p : ud) {
    EXPECT_LE(p.max_size, 1024u) << p.label;
    for (Op op : kAllOps) {
      if (p.weight[op_index(op)] != 0) {
        EXPECT_TRUE(transport_allows(Transport::kUd, op));
      }
    }
  }
  o.transport = Transport::kUc;
  const auto uc = restrict_to_transport(test_phases(o), o);
  ASSERT_EQ(uc.size(), 2u);
  for (const Message& m : make_plan(uc[0], 3, 0, Role::kClient, 0, 9u << 20))
    EXPECT_TRUE(transport_allows(Transport::kUc, m.op)) << op_info(m.op).name;
  EXPECT_EQ(transport_from_name("srq"), Transport::kSrq);
  EXPECT_FALSE(transport_from_name("xrc"));
}

TEST(Marker, TagSurvivesTheImmediateData) {
  const MarkerTag tag{17, 4097, 70001};
  const MarkerTag back = MarkerTag::from_imm(tag.imm());
  EXPECT_EQ(back.phase, 17u & MarkerTag::kPhaseMask);
  EXPECT_EQ(back.round, 4097u & MarkerTag::kRoundMask);
  EXPECT_EQ(back.consumed, 70001u & MarkerTag::kConsumedMask);
}

// A node's records survive the frames to the launcher, and the summary adds both
// nodes up (a streak is the larger one, not a sum).
TEST(Report, RecordsRoundTripIntoTheSummary) {
  PhaseRecord phase;
  phase.index = 3;
  phase.label = "READ/64KiB";
  phase.ns = 1000;
  phase.sent = 9;
  phase.lost = 2;
  phase.ops[op_index(Op::kRead)] = OpStats{3, 300, 30, 200};
  const std::optional<PhaseRecord> back = decode_phase(encode(phase).data());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->label, "READ/64KiB");
  EXPECT_EQ(back->lost, 2u);
  EXPECT_EQ(back->ops[op_index(Op::kRead)].max_length, 200u);

  SideReport sent;
  sent.transport = Transport::kUc;
  sent.errors = 1;
  sent.verified.sent = 9;
  sent.verified.lost = 2;
  sent.totals = {{"retransmitted_packets", 5}, {"retry_streak_max", 4}};
  SideReport client;
  client.phases[3] = *back;
  ASSERT_TRUE(decode_final(encode_final(sent).data(), client));
  EXPECT_TRUE(client.has_final);
  EXPECT_EQ(client.transport, Transport::kUc);

  SideReport server;
  server.totals = {{"retransmitted_packets", 1}, {"retry_streak_max", 6}};
  const Summary s = summarize(server, client);
  EXPECT_EQ(s.errors, 1u);
  EXPECT_EQ(s.verified.lost, 2u);
  EXPECT_EQ(s.counter("retransmitted_packets"), 6u);
  EXPECT_EQ(s.counter("retry_streak_max"), 6u);
  EXPECT_EQ(s.op(Op::kRead).messages, 3u);
  EXPECT_EQ(s.all.bytes, 300u);
}

// A truncated frame is refused, not read as zeros.
TEST(Report, TruncatedRecordsAreRefused) {
  PhaseRecord phase;
  phase.label = "mix";
  std::vector<uint8_t> bytes = encode(phase).data();
  bytes.pop_back();
  EXPECT_FALSE(decode_phase(bytes));
  SideReport r;
  std::vector<uint8_t> final_bytes = encode_final(r).data();
  final_bytes.pop_back();
  EXPECT_FALSE(decode_final(final_bytes, r));
  EXPECT_FALSE(r.has_final);
}

}  // namespace
}  // namespace softrdma::traffic
