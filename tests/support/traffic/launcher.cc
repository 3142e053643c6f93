#include "traffic/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>

namespace softrdma::traffic {

namespace {

struct Child {
  pid_t pid = -1;
  int out_fd = -1;      // its stdout, read end
  std::string partial;  // an incomplete last line
  ChildResult result;
};

// In the child: stdout to the pipe, the socketpair end kept open across exec.
[[noreturn]] void exec_child(ChildSpec spec, int out_w, int oob_fd) {
  dup2(out_w, STDOUT_FILENO);
  fcntl(oob_fd, F_SETFD, 0);  // clear FD_CLOEXEC: the node inherits it
  for (const auto& [name, value] : spec.env) {
    if (value.empty()) {
      unsetenv(name.c_str());
    } else {
      setenv(name.c_str(), value.c_str(), 1);
    }
  }
  spec.argv.push_back("--oob-fd=" + std::to_string(oob_fd));
  std::vector<char*> argv;
  for (std::string& a : spec.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

bool start_child(Child& c, const ChildSpec& spec, int oob_fd, std::string& error) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  c.pid = fork();
  if (c.pid < 0) {
    error = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (c.pid == 0) exec_child(spec, pipe_fds[1], oob_fd);
  close(pipe_fds[1]);
  c.out_fd = pipe_fds[0];
  return true;
}

// Reads what the child wrote; splits complete lines. False at end of file.
bool read_child(Child& c) {
  char buf[4096];
  const ssize_t n = read(c.out_fd, buf, sizeof buf);
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) {
    if (!c.partial.empty()) c.result.lines.push_back(c.partial);
    close(c.out_fd);
    c.out_fd = -1;
    return false;
  }
  c.partial.append(buf, size_t(n));
  size_t nl;
  while ((nl = c.partial.find('\n')) != std::string::npos) {
    c.result.lines.push_back(c.partial.substr(0, nl));
    c.partial.erase(0, nl + 1);
  }
  return true;
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
                       int time_limit_s) {
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
  while (started && (server.out_fd >= 0 || client.out_fd >= 0)) {
    pollfd fds[2] = {{server.out_fd, POLLIN, 0}, {client.out_fd, POLLIN, 0}};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      break;
    }
    if (poll(fds, 2, int(std::min<int64_t>(left.count(), 1000))) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) read_child(server);
    if (fds[1].revents != 0) read_child(client);
  }
  for (Child* c : {&server, &client}) {
    if (r.timed_out && c->pid > 0) kill(c->pid, SIGKILL);  // our own child, by pid
    if (c->out_fd >= 0) close(c->out_fd);
    reap(*c);
  }
  r.server = std::move(server.result);
  r.client = std::move(client.result);
  return r;
}

}  // namespace softrdma::traffic
