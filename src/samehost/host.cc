#include "samehost/host.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <set>

namespace softrdma::samehost {

namespace {

// pidfd_getfd(2) (Linux 5.6): a copy of another process's descriptor, allowed on
// the same terms as cross-memory attach.
int copy_descriptor(const ProcessMemory& memory, int fd) {
#ifdef SYS_pidfd_getfd
  if (memory.pidfd() < 0 || fd < 0) return -1;
  return int(syscall(SYS_pidfd_getfd, memory.pidfd(), fd, 0));
#else
  (void)memory;
  (void)fd;
  return -1;
#endif
}

}  // namespace

void say_once(const std::string& line) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard lock(mutex);
  if (said.insert(line).second) std::fprintf(stderr, "softrdma: %s\n", line.c_str());
}

Peer::~Peer() {
  if (doorbell >= 0) close(doorbell);
}

void Peer::ring() const {
  if (doorbell < 0) return;
  const uint64_t one = 1;
  (void)!::write(doorbell, &one, sizeof one);
}

std::unique_ptr<Host> Host::open(std::span<const Gid> gids, std::string& why,
                                 const std::string& directory) {
  remove_stale_node_segments(directory);
  std::unique_ptr<Host> host(new Host);
  host->directory_ = directory;
  host->node_ = NodeSegment::create(gids, why, directory);
  if (!host->node_) return nullptr;
  return host;
}

Host::~Host() = default;

void Host::take_faults(const std::function<void(uint32_t, uint32_t)>& take) {
  uint32_t qpn, event;
  while (node_->take_fault(qpn, event)) take(qpn, event);
}

std::shared_ptr<Peer> Host::peer(const Gid& gid) {
  std::lock_guard lock(peers_mutex_);
  auto it = peers_.find(gid);
  if (it != peers_.end() && it->second->usable()) return it->second;
  if (it != peers_.end()) peers_.erase(it);  // it exited; another may serve the GID now
  std::shared_ptr<Peer> peer = attach(gid);
  if (peer) peers_.emplace(gid, peer);
  return peer;
}

std::shared_ptr<Peer> Host::attach(const Gid& gid) {
  std::string why;
  auto node = PeerNode::open(gid, why, directory_);
  if (!node) return nullptr;  // no same-host process serves it: the wire, silently
  Reach reach;
  auto memory = ProcessMemory::attach(node->pid(), node->probe_addr(), node->probe_value(), reach);
  if (!memory) {
    say_once("same-host peer (pid " + std::to_string(node->pid()) + ") reached by UDP: " +
             describe(reach));
    return nullptr;
  }
  if (!node->join()) {
    say_once("same-host peer (pid " + std::to_string(node->pid()) +
             ") reached by UDP: it serves too many peer processes");
    return nullptr;
  }
  auto peer = std::make_shared<Peer>();
  peer->doorbell = copy_descriptor(*memory, node->header().doorbell_fd);
  peer->node = std::move(node);
  peer->memory = std::move(memory);
  return peer;
}

}  // namespace softrdma::samehost
