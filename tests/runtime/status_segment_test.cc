// The status segment's table of QP rows and its reader (issue 14 defects 9 and
// 11): a row for every QP however many there are, updates that never scan, a
// file that grows with the rows and starts small.
#include "runtime/status_segment.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "runtime/status_test_support.h"

namespace softrdma::runtime {
namespace {

StatusQpUpdate qp_row(uint32_t qpn, uint8_t state) {
  return StatusQpUpdate{qpn, qpn + 1, 2 /* IBV_QPT_RC */, state, {}};
}

const StatusReport* own_report(const std::vector<StatusReport>& reports) {
  for (const auto& r : reports)
    if (r.pid == getpid()) return &r;
  return nullptr;
}

// A new segment is one page, readable by its owner only, and reads back empty.
TEST(StatusSegmentTest, StartsAsOnePageReadableByItsOwnerOnly) {
  testing_support::TempDirectory dir;
  auto segment = StatusSegment::create("dev0", dir.path());
  ASSERT_NE(segment, nullptr);
  EXPECT_EQ(segment->path(), dir.path() + "/softrdma-" + std::to_string(getpid()) + "-dev0");
  struct stat st {};
  ASSERT_EQ(lstat(segment->path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(size_t(st.st_size), 4096u) << "the old table was 3.6 MB from the start";
  int stale = 0;
  const auto reports = read_status_segments(stale, dir.path());
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].device, "dev0");
  EXPECT_TRUE(reports[0].qps.empty());
}

// Issue 14 defect 11: past 65 536 QPs the old table was full, so every create and
// state change scanned all of it, and the QPs beyond had no row. Now every QP has
// a row, all of them read back, and changing one QP's state looks at one row.
TEST(StatusSegmentTest, EveryQpOfManyHasARowAndAnUpdateLooksAtOneRow) {
  constexpr uint32_t kQps = 70000;
  testing_support::TempDirectory dir;
  auto segment = StatusSegment::create("dev0", dir.path());
  ASSERT_NE(segment, nullptr);
  engine::QpCounters* counters_of_first = segment->update_qp(qp_row(2, 1), false);
  ASSERT_NE(counters_of_first, nullptr);
  engine::bump(counters_of_first->tx_packets, 7);
  uint32_t without_row = 0;
  for (uint32_t qpn = 3; qpn < 2 + kQps; ++qpn)
    without_row += segment->update_qp(qp_row(qpn, 1), false) == nullptr;
  EXPECT_EQ(without_row, 0u) << "QPs without a row";
  EXPECT_EQ(&segment->update_qp(qp_row(2, 1), false)->tx_packets, &counters_of_first->tx_packets)
      << "the table grew in place: a QP's counters never move";

  const uint64_t before = segment->rows_examined();
  segment->update_qp(qp_row(2 + kQps - 1, 3 /* RTS */), false);
  EXPECT_EQ(segment->rows_examined() - before, 1u) << "an update must not scan the table";

  int stale = 0;
  const auto reports = read_status_segments(stale, dir.path());
  const StatusReport* mine = own_report(reports);
  ASSERT_NE(mine, nullptr);
  ASSERT_EQ(mine->qps.size(), kQps) << "every QP is shown";
  EXPECT_EQ(mine->qps.front().qpn, 2u);
  EXPECT_EQ(mine->qps.front().tx_packets, 7u);
  EXPECT_EQ(mine->qps.back().qpn, 2 + kQps - 1);
  EXPECT_EQ(mine->qps.back().state, 3u);
}

// A destroyed QP's row is freed and the next QP takes it: the file does not grow
// with QPs that come and go.
TEST(StatusSegmentTest, RowsOfDestroyedQpsAreReused) {
  testing_support::TempDirectory dir;
  auto segment = StatusSegment::create("dev0", dir.path());
  ASSERT_NE(segment, nullptr);
  for (uint32_t round = 0; round < 1000; ++round) {
    const uint32_t qpn = 100 + round;
    auto* counters = segment->update_qp(qp_row(qpn, 1), false);
    ASSERT_NE(counters, nullptr);
    EXPECT_EQ(counters->tx_packets.load(), 0u) << "a reused row starts at zero";
    engine::bump(counters->tx_packets);
    EXPECT_EQ(segment->update_qp(qp_row(qpn, 6), true), nullptr);
  }
  EXPECT_EQ(segment->file_bytes(), 4096u);
  int stale = 0;
  const auto reports = read_status_segments(stale, dir.path());
  const StatusReport* mine = own_report(reports);
  ASSERT_NE(mine, nullptr);
  EXPECT_TRUE(mine->qps.empty());
}

// A killed process of another softrdma version left a segment of another layout
// (its header differs whenever a counter is added): it is still removed, by the
// pid in its name, once that process is gone; a live one's is left.
TEST(StatusSegmentTest, AnotherLayoutsSegmentOfADeadProcessIsRemovedToo) {
  testing_support::TempDirectory dir;
  const pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(testing_support::exit_code_of(dead), 0);
  auto leave = [&](pid_t pid) {
    const std::string path = dir.path() + "/softrdma-" + std::to_string(pid) + "-dev0";
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("srdmast2 an older layout", f);
    std::fclose(f);
    chmod(path.c_str(), 0600);
    return path;
  };
  const std::string dead_one = leave(dead), live_one = leave(getpid());
  EXPECT_EQ(remove_stale_status_segments(dir.path()), 1);
  EXPECT_FALSE(std::filesystem::exists(dead_one));
  EXPECT_TRUE(std::filesystem::exists(live_one));
}

// Issue 14 defect 9: the segment goes when its StatusSegment does, and a process
// that exits normally without closing leaves nothing (status_registry.h).
TEST(StatusSegmentTest, ExitRemovesASegmentNeverClosed) {
  testing_support::TempDirectory dir;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a failed ASSERT below must not leave it
    auto segment = StatusSegment::create("dev0", dir.path());
    if (segment == nullptr) _exit(3);
    testing_support::forget(segment.release());  // as librdmacm forgets its device
    std::exit(0);
  }
  EXPECT_EQ(testing_support::exit_code_of(child), 0);
  EXPECT_TRUE(testing_support::segments_of(child, dir.path()).empty())
      << "the exiting process removed its segment";
}

// A process killed by a signal runs no exit handler; the next device to open
// removes its segment (and leaves a live process's alone).
TEST(StatusSegmentTest, AKilledProcesssSegmentIsRemovedByTheNextOpen) {
  testing_support::TempDirectory dir;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a failed ASSERT below must not leave it
    auto segment = StatusSegment::create("dev0", dir.path());
    const char byte = segment != nullptr ? 'r' : 'x';
    if (write(ready[1], &byte, 1) != 1) _exit(3);
    pause();
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 'r');
  auto mine = StatusSegment::create("dev0", dir.path());
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(remove_stale_status_segments(dir.path()), 0) << "both processes are alive";
  kill(child, SIGKILL);
  testing_support::exit_code_of(child);
  ASSERT_FALSE(testing_support::segments_of(child, dir.path()).empty());
  EXPECT_EQ(remove_stale_status_segments(dir.path()), 1);
  EXPECT_TRUE(testing_support::segments_of(child, dir.path()).empty());
  EXPECT_FALSE(testing_support::segments_of(getpid(), dir.path()).empty());
  close(ready[0]);
  close(ready[1]);
}

}  // namespace
}  // namespace softrdma::runtime
