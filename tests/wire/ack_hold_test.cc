// The responder's hold in a timed acknowledgement (wire/ack_hold.h): nanoseconds in
// 32 bits, big-endian, saturated at both ends.
#include "wire/ack_hold.h"

#include <gtest/gtest.h>

#include <array>

namespace softrdma::wire {
namespace {

int64_t round_trip(int64_t hold_ns, std::array<uint8_t, kAckHoldBytes>* bytes = nullptr) {
  std::array<uint8_t, kAckHoldBytes> out{};
  write_ack_hold(out, hold_ns);
  if (bytes != nullptr) *bytes = out;
  return read_ack_hold(out);
}

TEST(AckHoldTest, NanosecondsBigEndianSaturatedAtBothEnds) {
  std::array<uint8_t, kAckHoldBytes> bytes{};
  EXPECT_EQ(round_trip(0x01020304, &bytes), 0x01020304);
  EXPECT_EQ(bytes, (std::array<uint8_t, 4>{1, 2, 3, 4}));
  EXPECT_EQ(round_trip(1'500'000), 1'500'000);
  EXPECT_EQ(round_trip(-5), 0) << "a clock that stepped back holds nothing";
  EXPECT_EQ(round_trip(int64_t(1) << 40), int64_t(UINT32_MAX)) << "4.29 s at most";
}

}  // namespace
}  // namespace softrdma::wire
