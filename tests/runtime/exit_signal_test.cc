// A process ended by SIGTERM, SIGINT or SIGHUP with the default action removes
// the names it made in /dev/shm (issue 27 finding 6; status_registry.h), and
// still ends by that signal; a signal the application handles or ignores stays
// the application's (docs/decisions/exit-signals.md). Each child makes a status
// segment in a private directory, says so through a pipe, and waits.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "runtime/status_segment.h"
#include "runtime/status_test_support.h"

namespace softrdma::runtime {
namespace {

using testing_support::segments_of;

void say(int fd, char byte) {
  if (write(fd, &byte, 1) != 1) _exit(3);
}

// Whether `sig`'s action in this process is `handler`.
bool action_is(int sig, void (*handler)(int)) {
  struct sigaction now {};
  return sigaction(sig, nullptr, &now) == 0 && (now.sa_flags & SA_SIGINFO) == 0 &&
         now.sa_handler == handler;
}

void application_handler(int) { _exit(7); }

// A child that runs `before` (the application's doings before its device opens),
// makes a segment in `dir`, runs `after`, says 'r' and waits for a signal.
template <typename Before, typename After>
pid_t child_with_a_segment(const std::string& dir, Before before, After after) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a failed ASSERT in the parent must not leave it
    before();
    auto segment = StatusSegment::create("dev0", dir);
    if (segment == nullptr) _exit(4);
    testing_support::forget(segment.release());  // never closed, as librdmacm's device
    after();
    say(ready[1], 'r');
    for (;;) pause();
  }
  close(ready[1]);  // a child that exits early is an end of file, not a hang
  char byte = 0;
  const bool ok = child > 0 && read(ready[0], &byte, 1) == 1 && byte == 'r';
  close(ready[0]);
  if (!ok && child > 0) waitpid(child, nullptr, 0);
  return ok ? child : -1;
}

int wait_status(pid_t child) {
  int status = 0;
  return waitpid(child, &status, 0) == child ? status : -1;
}

class EndingSignal : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Signals, EndingSignal, ::testing::Values(SIGTERM, SIGINT, SIGHUP));

// The default action: the segment goes, and the process still ends by the signal.
TEST_P(EndingSignal, WithTheDefaultActionRemovesTheSegmentAndStillEndsTheProcess) {
  testing_support::TempDirectory dir;
  const pid_t child = child_with_a_segment(dir.path(), [] {}, [] {});
  ASSERT_GT(child, 0);
  ASSERT_FALSE(segments_of(child, dir.path()).empty());
  kill(child, GetParam());
  const int status = wait_status(child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == GetParam())
      << "ended by " << strsignal(GetParam()) << ", not status " << status;
  EXPECT_TRUE(segments_of(child, dir.path()).empty()) << "the segment was left";
}

// A handler the application installed before its device opened is neither
// replaced nor wrapped: it alone runs.
TEST(EndingSignals, AnApplicationsHandlerIsKept) {
  testing_support::TempDirectory dir;
  const pid_t child = child_with_a_segment(
      dir.path(), [] { signal(SIGTERM, application_handler); },
      [] {
        if (!action_is(SIGTERM, application_handler)) _exit(8);
      });
  ASSERT_GT(child, 0);
  kill(child, SIGTERM);
  const int status = wait_status(child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << "status " << status;
}

// One the application installs after its device opened replaces softrdma's.
TEST(EndingSignals, AHandlerTheApplicationSetsLaterReplacesSoftrdmas) {
  testing_support::TempDirectory dir;
  const pid_t child =
      child_with_a_segment(dir.path(), [] {}, [] { signal(SIGTERM, application_handler); });
  ASSERT_GT(child, 0);
  kill(child, SIGTERM);
  const int status = wait_status(child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << "status " << status;
}

// An ignored signal stays ignored: the process lives on after raising it.
TEST(EndingSignals, AnIgnoredSignalStaysIgnored) {
  testing_support::TempDirectory dir;
  const pid_t child = child_with_a_segment(
      dir.path(), [] { signal(SIGTERM, SIG_IGN); },
      [] {
        raise(SIGTERM);
        if (!action_is(SIGTERM, SIG_IGN)) _exit(8);
      });
  ASSERT_GT(child, 0) << "SIGTERM ended it, or it was no longer ignored";
  kill(child, SIGKILL);
  const int status = wait_status(child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
}

// A forked child ended by SIGTERM removes none of its parent's names (it ends by
// SIGTERM all the same); the parent's own SIGTERM then removes them.
TEST(EndingSignals, AForkedChildRemovesNoneOfItsParents) {
  testing_support::TempDirectory dir;
  const std::string path = dir.path();
  const pid_t child = child_with_a_segment(path, [] {}, [&path] {
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      raise(SIGTERM);
      _exit(0);
    }
    int status = 0;
    if (waitpid(grandchild, &status, 0) != grandchild || !WIFSIGNALED(status) ||
        WTERMSIG(status) != SIGTERM)
      _exit(5);
    if (segments_of(getpid(), path).empty()) _exit(6);
  });
  ASSERT_GT(child, 0) << "the forked child removed its parent's segment, or did not end";
  kill(child, SIGTERM);
  const int status = wait_status(child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
  EXPECT_TRUE(segments_of(child, path).empty());
}

}  // namespace
}  // namespace softrdma::runtime
