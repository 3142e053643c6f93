// The switch port model (switch_queue.h): serialization at the link's rate,
// drop-tail at the buffer, CE marking of ECN-capable arrivals above a threshold.
#include "fabric_switch/switch_queue.h"

#include <gtest/gtest.h>

namespace softrdma::fabric {
namespace {

TEST(SwitchPortTest, PacketsLeaveAtTheLinksRateInArrivalOrder) {
  SwitchPort port({.rate_bits_per_s = 1'000'000'000, .buffer_bytes = 1 << 20, .mark_bytes = 0});
  EXPECT_EQ(port.head_departure(), kNoDeparture);
  EXPECT_EQ(port.arrive(1000, false, 0), Verdict::kQueue);  // 8 us on a 1 Gbit/s link
  EXPECT_EQ(port.arrive(500, false, 1'000), Verdict::kQueue);
  EXPECT_EQ(port.head_departure(), 8'000);
  EXPECT_EQ(port.queue_bytes(), 1500u);
  port.depart();
  EXPECT_EQ(port.head_departure(), 12'000);  // after the first, 4 us more
  port.depart();
  // An idle link starts at once.
  EXPECT_EQ(port.arrive(125, false, 100'000), Verdict::kQueue);
  EXPECT_EQ(port.head_departure(), 101'000);
}

TEST(SwitchPortTest, ABufferFullDropsWhatDoesNotFit) {
  SwitchPort port({.rate_bits_per_s = 1'000'000'000, .buffer_bytes = 2500, .mark_bytes = 0});
  EXPECT_EQ(port.arrive(1000, true, 0), Verdict::kQueue);
  EXPECT_EQ(port.arrive(1000, true, 0), Verdict::kQueue);
  EXPECT_EQ(port.arrive(1000, true, 0), Verdict::kDrop);  // 3000 > 2500, never marked
  EXPECT_EQ(port.arrive(500, true, 0), Verdict::kQueue);   // exactly full
  EXPECT_EQ(port.stats().dropped, 1u);
  EXPECT_EQ(port.stats().marked, 0u);
  EXPECT_EQ(port.stats().max_queue_bytes, 2500u);
}

TEST(SwitchPortTest, EcnCapableArrivalsAboveTheThresholdAreMarked) {
  SwitchPort port({.rate_bits_per_s = 1'000'000'000, .buffer_bytes = 1 << 20, .mark_bytes = 2000});
  EXPECT_EQ(port.arrive(1000, true, 0), Verdict::kQueue);   // queue 0
  EXPECT_EQ(port.arrive(1000, true, 0), Verdict::kQueue);   // 1000
  EXPECT_EQ(port.arrive(1000, true, 0), Verdict::kQueueMarked);  // 2000: at the threshold
  EXPECT_EQ(port.arrive(1000, false, 0), Verdict::kQueue);  // Not-ECT: queued unmarked
  port.depart();
  port.depart();
  port.depart();  // 1000 left
  EXPECT_EQ(port.arrive(1000, true, 0), Verdict::kQueue);
  EXPECT_EQ(port.stats().marked, 1u);
  EXPECT_EQ(port.stats().departed, 3u);
}

}  // namespace
}  // namespace softrdma::fabric
