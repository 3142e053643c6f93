// When a turn reads the sockets (engine/device_rx.cc, Device::Turner): a poller's
// turn (an application thread in ibv_poll_cq) every time while the wire carries
// traffic, and only every kQuietSocketCheck once nothing came for kQuietWire (its
// traffic is then on the same-host path); the loop's turn always. Nothing is lost:
// a packet not read yet waits in the socket.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/device.h"
#include "engine/roce/family.h"
#include "transport/fake/fake_network.h"

namespace softrdma::engine {
namespace {

namespace fake = transport::fake;
using Turner = Device::Turner;

const transport::Gid kLocal = fake::ipv4_gid(10, 1, 2, 3);
const transport::Gid kPeer = fake::ipv4_gid(10, 1, 2, 4);

class DevicePollerTest : public ::testing::Test {
 protected:
  // Any datagram: what a turn read is what left the socket.
  void arrive() {
    net_.inject(kPeer, kLocal, std::vector<uint8_t>(64, 0));
    ++arrived_;
  }
  uint64_t read() const { return arrived_ - transport_->queued(); }

  uint64_t arrived_ = 0;
  fake::FakeNetwork net_;
  ManualClock clock_;
  std::unique_ptr<fake::FakeTransport> transport_ = net_.attach(kLocal);
  std::unique_ptr<Device> device_ =
      std::make_unique<Device>(DeviceConfig{}, *transport_, roce::RoceFamily::maker(), clock_);
};

TEST_F(DevicePollerTest, APollerReadsAQuietWireOnlyNowAndThen) {
  arrive();
  device_->progress(Turner::kPoller);
  EXPECT_EQ(read(), 1u) << "the first turn reads";
  clock_.advance(1'000);
  arrive();
  device_->progress(Turner::kPoller);
  EXPECT_EQ(read(), 2u) << "traffic 1 µs ago: read";

  clock_.advance(Device::kQuietWire);
  device_->progress(Turner::kPoller);  // the wire is quiet: a check, empty
  arrive();
  clock_.advance(Device::kQuietSocketCheck / 2);
  device_->progress(Turner::kPoller);
  EXPECT_EQ(read(), 2u) << "quiet, checked just now: it waits in the socket";
  clock_.advance(Device::kQuietSocketCheck / 2);
  device_->progress(Turner::kPoller);
  EXPECT_EQ(read(), 3u) << "kQuietSocketCheck later: read";

  clock_.advance(Device::kQuietWire);
  device_->progress(Turner::kPoller);
  arrive();
  device_->progress(Turner::kLoop);
  EXPECT_EQ(read(), 4u) << "the loop reads whenever it turns";
}

}  // namespace
}  // namespace softrdma::engine
