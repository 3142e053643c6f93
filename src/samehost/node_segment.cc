#include "samehost/node_segment.h"

#include "samehost/grant_codec.h"
#include "samehost/robust_mutex.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace softrdma::samehost {

namespace {

constexpr char kPrefix[] = "softrdma-node-";

size_t align(size_t n) { return (n + 63) & ~size_t(63); }

uint64_t random_word() {
  uint64_t v = 0;
  while (v == 0)
    if (getrandom(&v, sizeof v, 0) != sizeof v) v = uint64_t(getpid()) * 0x9e3779b97f4a7c15u;
  return v;
}

}  // namespace

pid_t node_segment_owner(int fd) {
  NodeHeader h;
  if (pread(fd, &h, sizeof h, 0) != ssize_t(sizeof h)) return 0;
  uint64_t magic;
  std::memcpy(&magic, &h.magic, sizeof magic);
  return magic == kNodeMagic && h.version == kNodeVersion ? pid_t(h.pid) : 0;
}

namespace {

// A dead owner's segment says it no longer serves before its name goes, as its
// owner's destructor would have said. A peer that still maps it (a destination
// the same-host UD path remembers, Peer::usable_lately) sees it at its next
// send without asking the kernel, whose answer it keeps for a coarse clock tick
// (4 ms): a process taking over the address removes this name before it can
// send anything, so nothing sent to the address after that lands in the dead
// process (issue 27, finding 4; same-host.md, "A process that takes over an
// address").
void mark_not_serving(int fd) {
  void* header = mmap(nullptr, sizeof(NodeHeader), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (header == MAP_FAILED) return;
  static_cast<NodeHeader*>(header)->serving.store(0, std::memory_order_release);
  munmap(header, sizeof(NodeHeader));
}

// Removes `path` if it is a stale segment of this user (its owner has exited).
bool remove_if_stale(const std::string& path) {
  constexpr int kFlags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  int fd = open(path.c_str(), O_RDWR | kFlags);
  if (fd < 0) fd = open(path.c_str(), O_RDONLY | kFlags);  // removable, not writable
  if (fd < 0) return false;
  struct stat st {};
  const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const pid_t pid = regular ? node_segment_owner(fd) : 0;
  // An unfinished file (pid 0) is a writer's that died before it wrote the magic,
  // or one still being written: only the former is old.
  const bool stale = regular && st.st_uid == geteuid() &&
                     (pid == 0 ? st.st_mtime + 10 <= time(nullptr) : !process_exists(pid));
  if (stale && pid != 0) mark_not_serving(fd);  // pid != 0: the header was read whole
  close(fd);
  return stale && unlink(path.c_str()) == 0;
}

// Why `name` could not be made; for a name taken, by what and whose, so that
// whoever reads the line can remove it (same-host.md, "Names another user can
// take": a local user can take a GID's name; the device then goes by the wire).
std::string not_made(const std::string& name, int err) {
  std::string why = name + ": " + std::strerror(err);
  struct stat st {};
  if (err != EEXIST || lstat(name.c_str(), &st) != 0) return why;
  const char* what = S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISREG(st.st_mode) ? "a file" : "not a file";
  if (st.st_uid != geteuid())
    return why + " (" + what + " of another user, uid " + std::to_string(st.st_uid) + ")";
  return why + " (" + what + " of this user: another process serves this GID)";
}

}  // namespace

size_t NodeLayout::keys_offset() { return align(sizeof(NodeHeader)); }
size_t NodeLayout::qps_offset() {
  return keys_offset() + align(sizeof(KeyTable::Slot) * kKeys);
}
size_t NodeLayout::peers_offset() { return qps_offset() + align(sizeof(QpTable::Slot) * kQps); }
size_t NodeLayout::faults_offset() { return peers_offset() + align(sizeof(PeerSlot) * kPeers); }
size_t NodeLayout::recvs_offset() {
  return faults_offset() + align(sizeof(FaultQueue::Cell) * kFaults);
}
size_t NodeLayout::notices_offset() {
  return recvs_offset() + align(sizeof(RecvState) * kRecvQueues);
}
size_t NodeLayout::sges_offset() {
  return notices_offset() + align(sizeof(NoticeQueue::Cell) * kRecvQueues);
}
size_t NodeLayout::results_offset() {
  return sges_offset() + align(sizeof(RecvSge) * kSharedSges * kRecvQueues);
}
size_t NodeLayout::size() {
  return results_offset() + align(sizeof(RecvResult) * kSharedSges * kRecvQueues);
}

NodeView NodeView::at(void* base) {
  auto* bytes = static_cast<char*>(base);
  NodeView v;
  v.base = base;
  v.header = reinterpret_cast<NodeHeader*>(bytes);
  v.keys = KeyTable(reinterpret_cast<KeyTable::Slot*>(bytes + NodeLayout::keys_offset()),
                    NodeLayout::kKeys);
  v.qps = QpTable(reinterpret_cast<QpTable::Slot*>(bytes + NodeLayout::qps_offset()),
                  NodeLayout::kQps);
  v.peers = reinterpret_cast<PeerSlot*>(bytes + NodeLayout::peers_offset());
  v.faults = FaultQueue(&v.header->faults,
                        reinterpret_cast<FaultQueue::Cell*>(bytes + NodeLayout::faults_offset()),
                        NodeLayout::kFaults);
  v.recvs = reinterpret_cast<RecvState*>(bytes + NodeLayout::recvs_offset());
  v.notices = NoticeQueue(&v.header->notices,
                          reinterpret_cast<NoticeQueue::Cell*>(bytes + NodeLayout::notices_offset()),
                          NodeLayout::kRecvQueues);
  v.recv_sges = reinterpret_cast<RecvSge*>(bytes + NodeLayout::sges_offset());
  v.recv_results = reinterpret_cast<RecvResult*>(bytes + NodeLayout::results_offset());
  return v;
}

namespace {

// /proc/PID/stat's state (field 3, after the command's closing parenthesis) is Z
// or X and its thread count (field 20) is 1: the whole process has exited. A
// leader that is Z while other threads live ("Zl": it called pthread_exit, or the
// process is still tearing down) has not: its files, an access one of its threads
// is in, are not released yet. False when it cannot be read (no /proc).
bool process_exited(pid_t pid) {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[512];
  const ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  const char* end = std::strrchr(text, ')');
  if (end == nullptr || end[1] != ' ' || (end[2] != 'Z' && end[2] != 'X')) return false;
  const char* field = end + 2;  // field 3
  for (int number = 3; number < 20 && field != nullptr; ++number) {
    field = std::strchr(field, ' ');
    if (field != nullptr) ++field;
  }
  return field != nullptr && std::strtol(field, nullptr, 10) <= 1;
}

}  // namespace

bool process_exists(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno != EPERM) return false;
  return !process_exited(pid);
}

uint64_t network_namespace() {
  struct stat st {};
  return stat("/proc/self/ns/net", &st) == 0 ? uint64_t(st.st_ino) : 0;
}

std::string node_name(const Gid& gid, const std::string& directory, uint32_t block) {
  static const char hex[] = "0123456789abcdef";
  std::string name = directory + kPrefix + std::to_string(network_namespace()) + "-";
  for (uint8_t b : gid) {
    name += hex[b >> 4];
    name += hex[b & 15];
  }
  if (block != 0) name += "-block" + std::to_string(block);
  return name;
}

int remove_stale_node_segments(const std::string& directory) {
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) return 0;
  int removed = 0;
  while (dirent* entry = readdir(dir)) {
    if (std::strncmp(entry->d_name, kPrefix, sizeof kPrefix - 1) != 0) continue;
    if (remove_if_stale(directory + entry->d_name)) ++removed;
  }
  closedir(dir);
  return removed;
}

AtomicsGuard::AtomicsGuard(NodeHeader& header) : header_(header) {
  // A holder that died left at most one atomic's word unwritten: the old value
  // stays, as if the operation had not been executed.
  lock_shared_robust_mutex(header_.atomics);
}
AtomicsGuard::~AtomicsGuard() { pthread_mutex_unlock(&header_.atomics); }

std::unique_ptr<NodeSegment> NodeSegment::create(std::span<const Gid> gids, std::string& why,
                                                 const std::string& directory,
                                                 std::span<const uint32_t> blocks) {
  if (gids.empty()) return nullptr;
  std::unique_ptr<NodeSegment> node(new NodeSegment);
  node->gids_.assign(gids.begin(), gids.end());
  node->directory_ = directory;
  const uint32_t first_block = blocks.empty() ? 0 : blocks.front();
  const std::string first = node_name(gids.front(), directory, first_block);
  remove_if_stale(first);
  const int fd = open(first.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    why = not_made(first, errno);
    return nullptr;
  }
  node->names_.push_back(first);
  node->creator_ = getpid();
  if (ftruncate(fd, off_t(NodeLayout::size())) != 0) {
    why = first + ": " + std::strerror(errno);
    close(fd);
    return nullptr;  // the destructor unlinks it
  }
  node->view_.base = mmap(nullptr, NodeLayout::size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (node->view_.base == MAP_FAILED) {
    node->view_.base = nullptr;
    why = first + ": mmap: " + std::strerror(errno);
    return nullptr;
  }
  node->view_ = NodeView::at(node->view_.base);
  node->view_.faults.init();
  node->view_.notices.init();
  for (uint32_t i = NodeLayout::kRecvQueues; i > 0; --i) node->free_recvs_.push_back(i - 1);
  NodeHeader& h = *node->view_.header;
  h.version = kNodeVersion;
  h.pid = uint32_t(getpid());
  h.uid = uint32_t(geteuid());
  h.key_capacity = NodeLayout::kKeys;
  h.qp_capacity = NodeLayout::kQps;
  h.peer_capacity = NodeLayout::kPeers;
  node->probe_word_ = random_word();
  h.probe_addr = reinterpret_cast<uint64_t>(&node->probe_word_);
  h.probe_value = node->probe_word_;
  h.serving.store(1, std::memory_order_relaxed);
  h.doorbell_fd = -1;
  init_shared_robust_mutex(h.atomics);
  h.magic.store(kNodeMagic, std::memory_order_release);
  // The other GIDs (and blocks) name the same file (a peer may know this device by
  // any of them).
  for (const Gid& gid : gids) {
    if (blocks.empty()) node->add_name(node_name(gid, directory));
    for (uint32_t block : blocks) node->add_name(node_name(gid, directory, block));
  }
  return node;
}

bool NodeSegment::add_name(const std::string& name) {
  if (std::find(names_.begin(), names_.end(), name) != names_.end()) return false;
  remove_if_stale(name);
  if (link(names_.front().c_str(), name.c_str()) != 0) return false;
  names_.push_back(name);
  return true;
}

std::vector<std::string> NodeSegment::add_block(uint32_t block) {
  std::vector<std::string> added;
  for (const Gid& gid : gids_) {
    const std::string name = node_name(gid, directory_, block);
    if (add_name(name)) added.push_back(name);
  }
  return added;
}

NodeSegment::~NodeSegment() {
  if (getpid() == creator_) {
    if (view_.header != nullptr) view_.header->serving.store(0, std::memory_order_release);
    for (const std::string& name : names_) unlink(name.c_str());
  }
  if (view_.base != nullptr) munmap(view_.base, NodeLayout::size());
}

void NodeSegment::publish_key(uint32_t key, const KeyGrant& grant) {
  if (!view_.keys.put(key, encode(grant)))
    view_.header->key_overflow.store(1, std::memory_order_release);
}

void NodeSegment::revoke_key(uint32_t key) {
  if (!view_.keys.erase(key)) return;
  wait_for_accesses();
}

// Dekker with PeerNode::begin_access: the key's removal is ordered before the
// slots are read, a peer's odd `access` before its lookup; so either the peer's
// lookup misses the key, or this sees the access and waits for it to end.
void NodeSegment::wait_for_accesses() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (uint32_t i = 0; i < NodeLayout::kPeers; ++i) {
    PeerSlot& slot = view_.peers[i];
    const pid_t pid = pid_t(slot.pid.load(std::memory_order_acquire));
    if (pid == 0) continue;
    const uint64_t seen = slot.access.load(std::memory_order_seq_cst);
    if ((seen & 1) == 0) continue;
    for (uint32_t spins = 0; slot.access.load(std::memory_order_acquire) == seen; ++spins) {
      sched_yield();
      // A peer that died inside an access never ends it.
      if (spins % 1024 == 1023 && !process_exists(pid)) break;
    }
  }
}

bool NodeSegment::claim_abandoned(RecvResult& result, uint32_t index) const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (uint32_t i = 0; i < NodeLayout::kPeers; ++i) {
    const PeerSlot& slot = view_.peers[i];
    const pid_t pid = pid_t(slot.pid.load(std::memory_order_acquire));
    if (pid != 0 && (slot.access.load(std::memory_order_seq_cst) & 1) != 0 && process_exists(pid))
      return false;
  }
  // A claimer that finished between the caller's look and the scan marked it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return std::atomic_ref<uint32_t>(result.seq).load(std::memory_order_acquire) != index + 1;
}

bool StuckClaim::take_result(const NodeSegment& node, RecvResult& shared, uint32_t index,
                             RecvResult& out) {
  std::atomic_ref<uint32_t> seq(shared.seq);
  if (seq.load(std::memory_order_acquire) == index + 1) {
    std::memcpy(&out, &shared, sizeof out);
  } else if (!stuck_ || index_ != index) {
    stuck_ = true;
    index_ = index;
    return false;
  } else if (node.claim_abandoned(shared, index)) {
    out = RecvResult{};
    out.flags = RecvResult::kVoid;
  } else {
    return false;
  }
  stuck_ = false;
  seq.store(0, std::memory_order_relaxed);
  return true;
}

bool NodeSegment::take_fault(uint32_t& qpn, uint32_t& event) {
  FaultQueue::Value fault;
  if (!view_.faults.pop(fault)) return false;
  qpn = uint32_t(fault[0]);
  event = uint32_t(fault[0] >> 32);
  return true;
}

RecvState* NodeSegment::reserve_recv(uint32_t& index) {
  if (free_recvs_.empty()) return nullptr;
  index = free_recvs_.back();
  free_recvs_.pop_back();
  return &view_.recvs[index];
}

void NodeSegment::release_recv(uint32_t index) {
  close_recv(view_.recvs[index]);
  free_recvs_.push_back(index);
}

void NodeSegment::close_recv(RecvState& state) {
  state.qpn.store(0, std::memory_order_seq_cst);
  wait_for_accesses();
}

bool NodeSegment::take_notice(uint32_t& index) {
  NoticeQueue::Value notice;
  if (!view_.notices.pop(notice)) return false;
  index = uint32_t(notice[0]);
  return true;
}

void NodeSegment::publish_qp_entry(uint32_t key, const QpTable::Value& value) {
  if (published_qps_.contains(key)) {
    view_.qps.put(key, value);
  } else if (published_qps_.size() < view_.qps.capacity() && view_.qps.put_new(key, value)) {
    published_qps_.insert(key);
  }
}

void NodeSegment::publish_qp(uint32_t qpn, const QpGrant& grant) {
  publish_qp_entry(qpn, encode(grant));
}

void NodeSegment::remove_qp(uint32_t qpn) {
  if (published_qps_.erase(qpn) != 0) view_.qps.erase(qpn);
}

// Its PD in the grant's `pd`, its domain in `xrcd`, its queue in `recv_queue`.
void NodeSegment::publish_xrc_srq(uint32_t srqn, const SrqGrant& grant) {
  QpGrant as_qp;
  as_qp.pd = grant.pd;
  as_qp.xrcd = grant.xrcd;
  as_qp.recv_queue = grant.recv_queue;
  publish_qp_entry(srqn | kSrqKeyBit, encode(as_qp));
}

}  // namespace softrdma::samehost
