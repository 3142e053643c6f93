// The fake byte streams (transport/fake/fake_streams.h): what one end writes the
// other reads, in order, within a window; and each scripted fault does what a
// test of the iWARP family relies on — a hold delivers nothing until released,
// a close or a reset at an offset delivers the bytes before it and then the end,
// a drop resets both ends at once.
#include "transport/fake/fake_streams.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "transport/fake/fake_network.h"

namespace softrdma::transport::fake {
namespace {

class FakeStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = net_.attach(ipv4_gid(10, 0, 0, 1));
    b_ = net_.attach(ipv4_gid(10, 0, 0, 2));
    const auto joined = net_.join(*a_, *b_);
    link_ = joined.id;
    int err = 0;
    sa_ = a_->adopt(joined.fds[0], err);
    sb_ = b_->adopt(joined.fds[1], err);
    ASSERT_NE(sa_, kNoStream);
    ASSERT_NE(sb_, kNoStream);
  }
  ssize_t write(FakeStreams& t, StreamId s, const std::vector<uint8_t>& bytes) {
    iovec part{const_cast<uint8_t*>(bytes.data()), bytes.size()};
    return t.write(s, std::span(&part, 1));
  }
  // Everything readable now (stops at the end or an error, returned in `last`).
  std::vector<uint8_t> drain(FakeStreams& t, StreamId s, ssize_t& last) {
    std::vector<uint8_t> got;
    uint8_t buffer[7];  // small: reads in pieces
    while ((last = t.read(s, buffer)) > 0) got.insert(got.end(), buffer, buffer + last);
    return got;
  }
  std::vector<StreamEvent> poll(FakeStreams& t) {
    std::vector<StreamEvent> events(16);
    events.resize(t.poll(events));
    return events;
  }
  static std::vector<uint8_t> counting(size_t n, uint8_t from = 0) {
    std::vector<uint8_t> v(n);
    std::iota(v.begin(), v.end(), from);
    return v;
  }

  FakeStreamNetwork net_{64};  // a 64-byte window
  std::unique_ptr<FakeStreams> a_, b_;
  size_t link_ = 0;
  StreamId sa_ = kNoStream, sb_ = kNoStream;
};

TEST_F(FakeStreamsTest, BytesArriveInOrderWithinTheWindowAndRoomIsAnnounced) {
  const auto bytes = counting(100);
  EXPECT_EQ(write(*a_, sa_, bytes), 64) << "the window takes 64";
  a_->want_writable(sa_, true);
  EXPECT_TRUE(a_->waiting_for_room());
  auto events = poll(*b_);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StreamEvent::kReadable);
  ssize_t last = 0;
  auto got = drain(*b_, sb_, last);
  EXPECT_EQ(last, 0);
  EXPECT_EQ(got, counting(64));
  events = poll(*a_);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StreamEvent::kWritable);
  EXPECT_FALSE(a_->waiting_for_room());
  EXPECT_EQ(write(*a_, sa_, counting(36, 64)), 36);
  got = drain(*b_, sb_, last);
  EXPECT_EQ(got, counting(36, 64));
  EXPECT_EQ(net_.read(link_, kFirst), 100u);
}

TEST_F(FakeStreamsTest, HeldBytesArriveOnlyOnRelease) {
  EXPECT_EQ(write(*a_, sa_, counting(10)), 10);
  net_.hold(link_, kFirst);
  EXPECT_EQ(write(*a_, sa_, counting(10, 10)), 10);
  ssize_t last = 0;
  EXPECT_EQ(drain(*b_, sb_, last), counting(10)) << "only what came before the hold";
  EXPECT_TRUE(poll(*b_).empty());
  net_.release(link_, kFirst);
  EXPECT_EQ(drain(*b_, sb_, last), counting(10, 10));
}

TEST_F(FakeStreamsTest, ACloseAtAnOffsetDeliversTheBytesBeforeItThenTheEnd) {
  net_.end_at(link_, kFirst, 25, End::kClose);
  EXPECT_EQ(write(*a_, sa_, counting(40)), 40) << "the writer does not know yet";
  ssize_t last = 0;
  EXPECT_EQ(drain(*b_, sb_, last), counting(25));
  EXPECT_EQ(last, kEndOfStream);
  b_->close(sb_, StreamTransport::CloseMode::kNow);  // the reader ends its side
  EXPECT_EQ(drain(*a_, sa_, last).size(), 0u);
  EXPECT_EQ(last, kEndOfStream) << "the writer hears the reader's FIN";
}

TEST_F(FakeStreamsTest, AResetAtAnOffsetTellsTheWriterThereAndTheReaderAfterTheBytes) {
  net_.end_at(link_, kFirst, 30, End::kReset);
  EXPECT_EQ(write(*a_, sa_, counting(20)), 20);
  EXPECT_TRUE(poll(*a_).empty()) << "not at the offset yet";
  EXPECT_EQ(write(*a_, sa_, counting(20, 20)), 10) << "what lies before the offset";
  auto events = poll(*a_);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StreamEvent::kClosed);
  EXPECT_EQ(events[0].error, ECONNRESET);
  EXPECT_EQ(write(*a_, sa_, counting(1)), -ECONNRESET);
  ssize_t last = 0;
  EXPECT_EQ(drain(*b_, sb_, last), counting(30));
  EXPECT_EQ(last, -ECONNRESET);
}

TEST_F(FakeStreamsTest, ADropResetsBothEndsAndLosesWhatWasUnread) {
  EXPECT_EQ(write(*a_, sa_, counting(10)), 10);
  net_.drop(link_);
  for (auto* t : {a_.get(), b_.get()}) {
    auto events = poll(*t);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].kind, StreamEvent::kClosed);
    EXPECT_TRUE(poll(*t).empty()) << "reported once";
  }
  uint8_t buffer[16];
  EXPECT_EQ(b_->read(sb_, buffer), -ECONNRESET);
}

TEST_F(FakeStreamsTest, AConnectReachesAListenerAndAnUnknownPortIsRefused) {
  const int port = b_->listen(4000);
  ASSERT_EQ(port, 4000);
  int err = 0;
  EXPECT_EQ(a_->connect(b_->local_gid(), 4001, err), kNoStream);
  EXPECT_EQ(err, ECONNREFUSED);
  const StreamId s = a_->connect(b_->local_gid(), 4000, err);
  ASSERT_NE(s, kNoStream);
  auto mine = poll(*a_);
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].kind, StreamEvent::kConnected);
  auto theirs = poll(*b_);
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(theirs[0].kind, StreamEvent::kAccepted);
  EXPECT_EQ(write(*a_, s, counting(3)), 3);
  ssize_t last = 0;
  EXPECT_EQ(drain(*b_, theirs[0].stream, last), counting(3));
  Gid peer{};
  uint16_t peer_port = 0;
  ASSERT_TRUE(b_->peer_of(theirs[0].stream, peer, peer_port));
  EXPECT_EQ(peer, a_->local_gid());
}

}  // namespace
}  // namespace softrdma::transport::fake
