#include "samehost/host_registry.h"
#include "samehost/node_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "samehost/grant_codec.h"
#include "samehost/robust_mutex.h"

namespace softrdma::samehost {

namespace {

constexpr uint64_t kRegistryMagic = 0x5453494745524452;  // "RDREGIST"
// 2: RegistryMember::handover_doorbell. Processes of two versions cannot share an
// address: the older would never ring the newer's doorbell.
constexpr uint32_t kRegistryVersion = 2;

size_t align64(size_t n) { return (n + 63) & ~size_t(63); }
size_t members_offset() { return align64(sizeof(RegistryHeader)); }
size_t listeners_offset() { return members_offset() + align64(sizeof(RegistryMember) * kRegistrySlots); }
size_t registry_bytes() { return listeners_offset() + align64(sizeof(RegistryListener) * kRegistryListeners); }

uint64_t random_word() {
  uint64_t v = 0;
  while (v == 0)
    if (getrandom(&v, sizeof v, 0) != sizeof v) v = uint64_t(getpid()) * 0x9e3779b97f4a7c15u;
  return v;
}

// The file at `path` is still the one `fd` has open: a registry unlinked by its
// last member (under its lock) must not take new members.
bool still_linked(int fd, const std::string& path) {
  struct stat open_one {}, named {};
  return fstat(fd, &open_one) == 0 && stat(path.c_str(), &named) == 0 &&
         open_one.st_ino == named.st_ino && open_one.st_dev == named.st_dev;
}

std::string address_text(const wire::Gid& address) {
  char text[64];
  if (wire::gid_is_ipv4(address)) {
    const uint32_t a = wire::gid_to_ipv4(address);
    std::snprintf(text, sizeof text, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xff, (a >> 8) & 0xff, a & 0xff);
  } else {
    std::snprintf(text, sizeof text, "an IPv6 address");
  }
  return text;
}

[[gnu::cold]] std::string other_version_message(const wire::Gid& address, uint32_t version) {
  return "softrdma: " + address_text(address) + " is shared by processes of another softrdma " +
         "version (host registry version " + std::to_string(version) + ", this one " +
         std::to_string(kRegistryVersion) + "); processes of two versions cannot share an " +
         "address. Stop those processes, or give this one an address of its own with SOFTRDMA_ADDR.";
}

[[gnu::cold]] std::string other_user_message(const wire::Gid& address, uid_t uid) {
  const std::string text = address_text(address);
  return std::string("softrdma: ") + text + " is served by processes of user " + std::to_string(uid) +
         "; the processes of one user share an address (the kernel's SO_REUSEPORT rule). Run as "
         "that user, or give this process an address of its own with SOFTRDMA_ADDR.";
}

}  // namespace

std::string registry_name(const wire::Gid& address, uint64_t netns, const std::string& directory) {
  std::string name = directory + kRegistryPrefix + std::to_string(netns) + "-";
  static const char kHex[] = "0123456789abcdef";
  for (uint8_t byte : address) {
    name += kHex[byte >> 4];
    name += kHex[byte & 15];
  }
  return name;
}

uint64_t process_start_time(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  // The command name (field 2) may hold spaces and parentheses: fields resume
  // after the last ')', with field 3 (the state) first.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  for (int number = 3; number <= 22 && fields >> field; ++number)
    if (number == 22) return std::strtoull(field.c_str(), nullptr, 10);
  return 0;
}

// The registry's lock; a holder that died leaves it consistent enough to reuse
// (each change is a few stores, and reap() checks every slot anyway).
class HostRegistry::Locked {
 public:
  explicit Locked(RegistryHeader& header) : lock_(header.lock) {
    lock_shared_robust_mutex(lock_);
  }
  ~Locked() { pthread_mutex_unlock(&lock_); }

 private:
  pthread_mutex_t& lock_;
};

// Every version keeps the header's magic, version and uid, and each member's pid
// and start time, where version 1 put them: liveness can be read in any.
bool HostRegistry::another_version_alive() const {
  for (uint32_t slot = 1; slot < kRegistrySlots; ++slot)
    if (members_[slot].pid.load(std::memory_order_acquire) != 0 && alive(members_[slot])) return true;
  return false;
}

bool HostRegistry::alive(const RegistryMember& member) const {
  const pid_t pid = member.pid.load(std::memory_order_acquire);
  if (!process_exists(pid)) return false;
  return member.start_time == 0 || process_start_time(pid) == member.start_time;
}

namespace {

// Opens the registry file, creating it (0600) when there is none. -1 and why.
int open_registry_file(const std::string& path, bool& created, std::string& why) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  created = fd >= 0;
  if (fd < 0 && errno == EEXIST) fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) why = "softrdma: cannot open " + path + ": " + std::strerror(errno);
  return fd;
}

// Until the creator has sized the file and written the magic (a creator that
// died before leaves an old, unfinished file: false, to be replaced).
bool wait_until_finished(int fd, const std::string& path) {
  for (int tries = 0; tries < 2000; ++tries) {
    struct stat st {};
    if (fstat(fd, &st) != 0) return false;
    if (size_t(st.st_size) >= registry_bytes()) {
      uint64_t magic = 0;
      if (pread(fd, &magic, sizeof magic, 0) == ssize_t(sizeof magic) && magic == kRegistryMagic)
        return true;
    }
    if (st.st_mtime + 10 < time(nullptr)) {
      unlink(path.c_str());  // unfinished and old: its creator is gone
      return false;
    }
    const timespec step{0, 1'000'000};
    nanosleep(&step, nullptr);
  }
  return false;
}

void initialise(RegistryHeader& header) {
  header.version = kRegistryVersion;
  header.uid = uint32_t(geteuid());
  init_shared_robust_mutex(header.lock);
  header.probe_nonce.store(random_word(), std::memory_order_relaxed);
  header.magic.store(kRegistryMagic, std::memory_order_release);
}

}  // namespace

std::unique_ptr<HostRegistry> HostRegistry::join(const wire::Gid& address, std::string& why,
                                                 const std::string& directory,
                                                 const AloneCheck& alone_check) {
  const std::string path = registry_name(address, network_namespace(), directory);
  for (int attempt = 0; attempt < 3; ++attempt) {
    bool created = false;
    const int fd = open_registry_file(path, created, why);
    if (fd < 0) return nullptr;
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) {
      close(fd);
      why = other_user_message(address, st.st_uid);
      return nullptr;
    }
    if (created && ftruncate(fd, off_t(registry_bytes())) != 0) {
      why = "softrdma: cannot size " + path + ": " + std::strerror(errno);
      close(fd);
      unlink(path.c_str());
      return nullptr;
    }
    if (!created && !wait_until_finished(fd, path)) {
      close(fd);
      continue;
    }
    std::unique_ptr<HostRegistry> registry = map(fd, path, why);
    if (!registry) return nullptr;
    if (created) initialise(*registry->header_);
    if (registry->header_->version != kRegistryVersion) {
      // Left by processes of another version that are all gone (killed, or the
      // last of them did not remove it): replaced. Some alive: refused.
      if (!registry->another_version_alive()) {
        if (still_linked(fd, path)) unlink(path.c_str());
        continue;  // the registry object unmaps it, having joined nothing
      }
      why = other_version_message(address, registry->header_->version);
      return nullptr;
    }
    if (registry->take_slot(why, alone_check)) return registry;
    if (!why.empty()) return nullptr;  // full; else unlinked meanwhile: again
  }
  if (why.empty()) why = "softrdma: the host registry " + path + " kept changing; try again";
  return nullptr;
}

std::unique_ptr<HostRegistry> HostRegistry::map(int fd, const std::string& path, std::string& why) {
  void* base = mmap(nullptr, registry_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    why = "softrdma: cannot map " + path + ": " + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  std::unique_ptr<HostRegistry> registry(new HostRegistry);
  registry->path_ = path;
  registry->base_ = base;
  registry->size_ = registry_bytes();
  registry->header_ = static_cast<RegistryHeader*>(base);
  registry->members_ = reinterpret_cast<RegistryMember*>(static_cast<char*>(base) + members_offset());
  registry->listeners_ = reinterpret_cast<RegistryListener*>(static_cast<char*>(base) + listeners_offset());
  registry->fd_ = fd;
  return registry;
}

// This user's registry file at `path`, finished by its creator, mapped without
// joining it; null otherwise (none, another user's, one still being made: its
// joiners replace it if its creator died, wait_until_finished).
std::unique_ptr<HostRegistry> HostRegistry::map_finished(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return nullptr;
  struct stat st {};
  uint64_t magic = 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      size_t(st.st_size) < registry_bytes() ||
      pread(fd, &magic, sizeof magic, 0) != ssize_t(sizeof magic) || magic != kRegistryMagic) {
    close(fd);
    return nullptr;
  }
  std::string why;
  return map(fd, path, why);
}

int HostRegistry::remove_abandoned(const std::string& directory) {
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) return 0;
  int removed = 0;
  while (dirent* entry = readdir(dir)) {
    if (std::strncmp(entry->d_name, kRegistryPrefix, sizeof kRegistryPrefix - 1) != 0) continue;
    std::unique_ptr<HostRegistry> registry = map_finished(directory + entry->d_name);
    if (registry && registry->unlink_if_abandoned()) ++removed;
  }
  closedir(dir);
  return removed;
}

int HostRegistry::live_processes(const wire::Gid& address, const std::string& directory) {
  const std::unique_ptr<HostRegistry> registry =
      map_finished(registry_name(address, network_namespace(), directory));  // joins nothing
  if (!registry || registry->header_->version != kRegistryVersion) return 0;
  std::set<pid_t> live;  // a process holding several slots is one
  for (uint32_t slot = 1; slot < kRegistrySlots; ++slot) {
    const RegistryMember& member = registry->members_[slot];
    if (member.pid.load(std::memory_order_acquire) != 0 && registry->alive(member))
      live.insert(member.pid.load(std::memory_order_relaxed));
  }
  return int(live.size());
}

// Nobody joined, so the destructor only unmaps. Under the lock, as the last
// member's exit: a joiner that opened the file meanwhile finds it unlinked and
// starts again (take_slot).
bool HostRegistry::unlink_if_abandoned() {
  if (header_->version != kRegistryVersion) {
    // Another layout: its lock may not be where this one's is; liveness is.
    if (another_version_alive() || !still_linked(fd_, path_)) return false;
    return unlink(path_.c_str()) == 0;
  }
  Locked lock(*header_);
  reap_locked();
  for (uint32_t slot = 1; slot < kRegistrySlots; ++slot)
    if (members_[slot].pid.load(std::memory_order_relaxed) != 0) return false;
  return still_linked(fd_, path_) && unlink(path_.c_str()) == 0;
}

bool HostRegistry::take_slot(std::string& why, const AloneCheck& alone_check) {
  Locked lock(*header_);
  if (!still_linked(fd_, path_)) return false;
  reap_locked();
  slot_ = claim_free_slot_locked();
  if (slot_ == 0) {
    why = "softrdma: all " + std::to_string(kRegistrySlots - 2) + " slots of " + path_ +
          " are held by live processes";
    return false;
  }
  if (!alone_check || !alone_locked()) return true;
  why = alone_check();
  if (why.empty()) return true;
  // Refused, and alone: the slot back, and the file gone (under the lock, as the
  // last one out removes it in ~HostRegistry).
  members_[slot_].pid.store(0, std::memory_order_release);
  header_->generation.fetch_add(1, std::memory_order_acq_rel);
  slots_.clear();
  slot_ = 0;
  unlink(path_.c_str());
  return false;
}

// A second device of this process is not alone either: its first one's socket
// is in the group already.
bool HostRegistry::alone_locked() const {
  for (uint32_t slot = 1; slot < kRegistrySlots; ++slot)
    if (slot != slot_ && members_[slot].pid.load(std::memory_order_relaxed) != 0) return false;
  return true;
}

uint32_t HostRegistry::claim_free_slot_locked() {
  for (uint32_t slot = 1; slot + 1 < kRegistrySlots; ++slot) {
    RegistryMember& member = members_[slot];
    if (member.pid.load(std::memory_order_relaxed) != 0) continue;
    member.start_time = process_start_time(getpid());
    member.primary.store(slots_.empty() ? slot : slots_.front(), std::memory_order_relaxed);
    // A later slot of a process whose index is known has it too (one socket).
    const int32_t index = slots_.empty() ? kIndexUnknown
                                         : members_[slots_.front()].index.load(std::memory_order_relaxed);
    member.index.store(index, std::memory_order_relaxed);
    member.pid.store(getpid(), std::memory_order_release);
    slots_.push_back(slot);
    header_->generation.fetch_add(1, std::memory_order_acq_rel);
    return slot;
  }
  return 0;
}

bool HostRegistry::move_to_another_slot() {
  Locked lock(*header_);
  reap_locked();
  const std::vector<uint32_t> held = slots_;
  slots_.clear();  // the slot claimed next is the process's first: its own primary
  const uint32_t fresh = claim_free_slot_locked();
  if (fresh == 0) {
    slots_ = held;
    return false;
  }
  for (uint32_t slot : held) {
    members_[slot].primary.store(fresh, std::memory_order_release);
    slots_.push_back(slot);
  }
  slot_ = fresh;
  return true;
}

uint32_t HostRegistry::take_another_slot() {
  Locked lock(*header_);
  reap_locked();
  return claim_free_slot_locked();
}

bool HostRegistry::reap_locked() {
  bool reaped = false;
  for (uint32_t slot = 1; slot < kRegistrySlots; ++slot) {
    RegistryMember& member = members_[slot];
    if (member.pid.load(std::memory_order_relaxed) == 0 || alive(member)) continue;
    for (uint32_t i = 0; i < kRegistryListeners; ++i)
      if (listeners_[i].slot == slot) listeners_[i] = RegistryListener{};
    member.pid.store(0, std::memory_order_release);
    reaped = true;
  }
  if (reaped) header_->generation.fetch_add(1, std::memory_order_acq_rel);
  return reaped;
}

bool HostRegistry::reap() {
  Locked lock(*header_);
  return reap_locked();
}

HostRegistry::~HostRegistry() {
  if (header_ == nullptr) return;
  // One that never joined (its file was unlinked meanwhile) leaves nothing: the
  // path may name another file by now.
  if (!slots_.empty()) {
    Locked lock(*header_);
    for (uint32_t i = 0; i < kRegistryListeners; ++i)
      if (listeners_[i].slot == slot_) listeners_[i] = RegistryListener{};
    for (uint32_t slot : slots_) members_[slot].pid.store(0, std::memory_order_release);
    header_->generation.fetch_add(1, std::memory_order_acq_rel);
    reap_locked();
    bool anyone = false;
    for (uint32_t slot = 1; slot < kRegistrySlots && !anyone; ++slot)
      anyone = members_[slot].pid.load(std::memory_order_relaxed) != 0;
    // The last one out removes the file, under the lock: a joiner that opened it
    // meanwhile sees it unlinked (still_linked) and starts again. Only while the
    // path is still this file: another may have replaced it.
    if (!anyone && still_linked(fd_, path_)) unlink(path_.c_str());
  }
  munmap(base_, size_);
  close(fd_);
}

void HostRegistry::set_index(int32_t index) {
  for (uint32_t slot : slots_) members_[slot].index.store(index, std::memory_order_release);
  header_->generation.fetch_add(1, std::memory_order_acq_rel);
}

std::vector<HostRegistry::Member> HostRegistry::members() {
  reap();
  std::vector<Member> out;
  for (uint32_t slot = 1; slot < kRegistrySlots; ++slot) {
    const pid_t pid = members_[slot].pid.load(std::memory_order_acquire);
    if (pid != 0) out.push_back({slot, pid, members_[slot].index.load(std::memory_order_acquire)});
  }
  return out;
}

uint64_t HostRegistry::new_probe_round() {
  const uint64_t nonce = random_word();
  header_->probe_nonce.store(nonce, std::memory_order_release);
  return nonce;
}

std::optional<pid_t> HostRegistry::owner(uint32_t slot) const {
  if (slot == 0 || slot >= kRegistrySlots) return std::nullopt;
  const RegistryMember& member = members_[slot];
  if (member.pid.load(std::memory_order_acquire) == 0 || !alive(member)) return std::nullopt;
  return pid_t(member.pid.load(std::memory_order_relaxed));
}

bool HostRegistry::add_listener(uint64_t service_id) {
  Locked lock(*header_);
  reap_locked();
  RegistryListener* free_entry = nullptr;
  for (uint32_t i = 0; i < kRegistryListeners; ++i) {
    RegistryListener& entry = listeners_[i];
    if (entry.slot == 0) {
      if (free_entry == nullptr) free_entry = &entry;
    } else if (entry.service_id == service_id) {
      return entry.slot == slot_;  // IBA 12.6.5: one listener per ServiceID
    }
  }
  if (free_entry == nullptr) return false;
  free_entry->service_id = service_id;
  free_entry->slot = slot_;
  return true;
}

void HostRegistry::remove_listener(uint64_t service_id) {
  Locked lock(*header_);
  for (uint32_t i = 0; i < kRegistryListeners; ++i)
    if (listeners_[i].slot == slot_ && listeners_[i].service_id == service_id)
      listeners_[i] = RegistryListener{};
}

uint32_t HostRegistry::listener(uint64_t service_id) const {
  Locked lock(*header_);
  for (uint32_t i = 0; i < kRegistryListeners; ++i)
    if (listeners_[i].slot != 0 && listeners_[i].service_id == service_id) return listeners_[i].slot;
  return 0;
}

}  // namespace softrdma::samehost
