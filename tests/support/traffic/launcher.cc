#include "traffic/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

namespace softrdma::traffic {

namespace {

struct Child {
  pid_t pid = -1;
  std::unique_ptr<OobChannel> report;  // null once the node closed it
  std::optional<Progress> progress;    // its latest
  ChildResult result;
};

// In the child: both socketpair ends kept open across exec, named on its
// command line.
[[noreturn]] void exec_child(ChildSpec spec, int report_fd, int oob_fd) {
  fcntl(oob_fd, F_SETFD, 0);  // clear FD_CLOEXEC: the node inherits them
  fcntl(report_fd, F_SETFD, 0);
  for (const auto& [name, value] : spec.env) {
    if (value.empty()) {
      unsetenv(name.c_str());
    } else {
      setenv(name.c_str(), value.c_str(), 1);
    }
  }
  spec.argv.push_back("--oob-fd=" + std::to_string(oob_fd));
  spec.argv.push_back("--report-fd=" + std::to_string(report_fd));
  std::vector<char*> argv;
  for (std::string& a : spec.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

bool start_child(Child& c, const ChildSpec& spec, int oob_fd, std::string& error) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    error = std::string("socketpair: ") + std::strerror(errno);
    return false;
  }
  c.pid = fork();
  if (c.pid < 0) {
    error = std::string("fork: ") + std::strerror(errno);
    close(sv[0]);
    close(sv[1]);
    return false;
  }
  if (c.pid == 0) exec_child(spec, sv[1], oob_fd);
  close(sv[1]);
  c.report = std::make_unique<OobChannel>(sv[0]);
  return true;
}

// Both nodes' progress in the latest phase either has reached.
void tell_progress(const Child& a, const Child& b, RunObserver& observer) {
  Progress sum;
  for (const Child* c : {&a, &b})
    if (c->progress) sum.phase = std::max(sum.phase, c->progress->phase);
  for (const Child* c : {&a, &b}) {
    if (!c->progress || c->progress->phase != sum.phase) continue;
    sum.done += c->progress->done;
    sum.total += c->progress->total;
  }
  observer.on_progress(sum);
}

// One frame from `c`; false when it is not a report frame a node sends.
bool take_frame(Child& c, const Frame& f, const Child& other, bool c_is_server,
                RunObserver* observer) {
  switch (f.type) {
    case MsgType::kProgress:
      c.progress = decode_progress(f.payload);
      if (c.progress && observer) {
        c_is_server ? tell_progress(c, other, *observer) : tell_progress(other, c, *observer);
      }
      return c.progress.has_value();
    case MsgType::kPhaseResult: {
      std::optional<PhaseRecord> r = decode_phase(f.payload);
      if (!r) return false;
      const uint32_t index = r->index;
      c.result.report.phases[index] = std::move(*r);
      auto theirs = other.result.report.phases.find(index);
      if (observer && theirs != other.result.report.phases.end()) {
        const PhaseRecord& mine = c.result.report.phases[index];
        c_is_server ? observer->on_phase(mine, theirs->second)
                    : observer->on_phase(theirs->second, mine);
      }
      return true;
    }
    case MsgType::kFinalResult:
      return decode_final(f.payload, c.result.report);
    default:
      return false;
  }
}

// Reads what `c` sent; closes its channel at end of file.
void read_reports(Child& c, const Child& other, bool c_is_server, RunObserver* observer,
                  std::string& error) {
  if (!c.report->receive()) error = c.report->error();
  while (std::optional<Frame> f = c.report->next()) {
    if (!take_frame(c, *f, other, c_is_server, observer) && error.empty())
      error = "a malformed report frame (type " + std::to_string(int(f->type)) + ")";
  }
  if (c.report->closed() || !error.empty()) c.report.reset();
}

void reap(Child& c) {
  if (c.pid <= 0) return;
  int status = 0;
  while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) c.result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) c.result.signal = WTERMSIG(status);
}

}  // namespace

std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(buf, size_t(n));
}

PairResult launch_pair(const ChildSpec& server_spec, const ChildSpec& client_spec,
                       int time_limit_s, RunObserver* observer) {
  PairResult r;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    r.error = std::string("socketpair: ") + std::strerror(errno);
    return r;
  }
  Child server, client;
  const bool started = start_child(server, server_spec, sv[0], r.error) &&
                       start_child(client, client_spec, sv[1], r.error);
  close(sv[0]);
  close(sv[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(time_limit_s);
  while (started && (server.report || client.report)) {
    pollfd fds[2] = {{server.report ? server.report->fd() : -1, POLLIN, 0},
                     {client.report ? client.report->fd() : -1, POLLIN, 0}};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      break;
    }
    if (poll(fds, 2, int(std::min<int64_t>(left.count(), 1000))) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) read_reports(server, client, true, observer, r.error);
    if (fds[1].revents != 0) read_reports(client, server, false, observer, r.error);
  }
  for (Child* c : {&server, &client}) {
    if (r.timed_out && c->pid > 0) kill(c->pid, SIGKILL);  // our own child, by pid
    c->report.reset();
    reap(*c);
  }
  r.server = std::move(server.result);
  r.client = std::move(client.result);
  return r;
}

}  // namespace softrdma::traffic
