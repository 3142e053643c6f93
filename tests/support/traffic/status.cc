#include "traffic/status.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <vector>

extern char** environ;

namespace softrdma::traffic {

namespace {

// The environment for `softrdma status`: ours without the capture and fault
// settings (it opens a device of its own: it must not truncate our capture file).
std::vector<std::string> status_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v = *e;
    if (v.rfind("SOFTRDMA_PCAP=", 0) == 0 || v.rfind("SOFTRDMA_FAULTS=", 0) == 0) continue;
    env.push_back(v);
  }
  return env;
}

bool run_capturing(const std::string& tool, std::string& out, std::string& error) {
  int fds[2];
  if (pipe(fds) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<std::string> env = status_environment();
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string command = "status";
  char* argv[] = {const_cast<char*>(tool.c_str()), command.data(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, tool.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) out.append(buf, size_t(n));
  close(fds[0]);
  if (rc != 0) {
    error = "cannot run " + tool + ": " + std::strerror(rc);
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    error = tool + " status failed";
    return false;
  }
  return true;
}

}  // namespace

std::map<std::string, uint64_t> engine_counters_from_status(const std::string& tool,
                                                            std::string& error) {
  std::map<std::string, uint64_t> counters;
  std::string out;
  if (!run_capturing(tool, out, error)) return counters;
  // "process PID  device ..." opens a block; "  engine.NAME VALUE" lines follow.
  const std::string mine = "process " + std::to_string(getpid()) + " ";
  std::istringstream in(out);
  bool in_block = false, found = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("process ", 0) == 0) {
      in_block = line.rfind(mine, 0) == 0;
      found |= in_block;
      continue;
    }
    if (!in_block) continue;
    std::istringstream fields(line);
    std::string name;
    uint64_t value = 0;
    if (fields >> name >> value && name.rfind("engine.", 0) == 0) counters[name.substr(7)] = value;
  }
  if (!found) error = "`" + tool + " status` did not list this process";
  return counters;
}

}  // namespace softrdma::traffic
