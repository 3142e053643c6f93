#include "runtime/status_registry.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "runtime/status_file.h"

namespace softrdma::runtime::status_registry {

namespace {

struct Entry {
  std::string path;
  pid_t pid;  // the process that made it: a forked child removes none of its parent's
  dev_t dev;
  ino_t ino;
};

struct Registry {
  std::mutex mutex;
  std::vector<Entry> entries;
};

// Never destroyed: the exit handler and a device closed from a static destructor
// (or a thread still running at exit) must not meet a destructed registry.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// Runs at exit() (atexit: after the static destructors of objects made later,
// before those of earlier ones). try_lock: a child forked while another thread
// held the lock would wait forever; its leftovers are then the next reader's.
void remove_at_exit() {
  Registry& r = registry();
  std::unique_lock lock(r.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  for (const Entry& e : r.entries)
    if (e.pid == getpid()) status_file::remove_if_same(e.path, e.dev, e.ino);
  r.entries.clear();
}

}  // namespace

void add(const std::string& path, dev_t dev, ino_t ino) {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(remove_at_exit); });
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.entries.push_back({path, getpid(), dev, ino});
}

bool remove(const std::string& path, dev_t& dev, ino_t& ino) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (auto it = r.entries.begin(); it != r.entries.end(); ++it) {
    if (it->path != path || it->pid != getpid()) continue;
    dev = it->dev;
    ino = it->ino;
    r.entries.erase(it);
    return true;
  }
  return false;
}

bool holds(const std::string& path) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const Entry& e : r.entries)
    if (e.path == path && e.pid == getpid()) return true;
  return false;
}

}  // namespace softrdma::runtime::status_registry
