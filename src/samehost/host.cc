#include "samehost/host.h"

#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <set>

#include "wire/qpn_blocks.h"

namespace softrdma::samehost {


void say_once(const std::string& line) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard lock(mutex);
  if (said.insert(line).second) std::fprintf(stderr, "softrdma: %s\n", line.c_str());
}

Peer::~Peer() {
  if (doorbell >= 0) close(doorbell);
}

bool Peer::ring() const {
  return doorbell >= 0 && progress::wake_loop(node->header().loop_wake, doorbell);
}

// Yama's ptrace_scope 1 (Ubuntu's default) lets a process attach only to its own
// descendants unless the target names its tracers: every process may then act as
// this one's RNIC, as UCX allows its peers (the same user's processes could attach
// to each other under scope 0 anyway). Scopes 2 and 3 are left as they are: cross-
// memory attach then fails and peers use UDP, saying why once.
void allow_same_user_peers() {
  FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (f == nullptr) return;
  int scope = -1;
  if (std::fscanf(f, "%d", &scope) != 1) scope = -1;
  std::fclose(f);
  if (scope == 1) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}

std::unique_ptr<Host> Host::open(std::span<const Gid> gids, std::string& why,
                                 const std::string& directory, std::span<const uint32_t> blocks) {
  const int stale = remove_stale_node_segments(directory);
  allow_same_user_peers();
  std::unique_ptr<Host> host(new Host);
  host->directory_ = directory;
  host->stale_removed_at_open_ = stale;
  host->node_ = NodeSegment::create(gids, why, directory, blocks);
  if (!host->node_) return nullptr;
  return host;
}

Host::~Host() = default;

void Host::take_faults(const std::function<void(uint32_t, uint32_t)>& take) {
  uint32_t qpn, event;
  while (node_->take_fault(qpn, event)) take(qpn, event);
}

std::shared_ptr<Peer> Host::cached(const PeerKey& key) {
  auto it = peers_.find(key);
  if (it == peers_.end()) return nullptr;
  if (it->second->usable()) return it->second;
  // It exited (another process may serve the GID now): what it left goes.
  peers_.erase(it);
  peer_gone();
  return nullptr;
}

std::shared_ptr<Peer> Host::peer(const Gid& gid, uint32_t qpn) {
  const uint32_t block = wire::qpn_block(qpn);
  std::lock_guard lock(peers_mutex_);
  const PeerKey by_block{gid, block}, by_gid{gid, 0};
  if (block != 0) {
    if (auto peer = cached(by_block)) return peer;
  }
  if (auto peer = cached(by_gid)) return peer;
  // A shared address's process by the QPN's block, else the GID's one process.
  if (block != 0) {
    if (auto peer = attach(gid, block)) {
      peers_.emplace(by_block, peer);
      return peer;
    }
  }
  std::shared_ptr<Peer> peer = attach(gid, 0);
  if (peer) peers_.emplace(by_gid, peer);
  return peer;
}

void Host::peer_gone() {
  remove_stale_node_segments(directory_);
  if (on_peer_gone_) on_peer_gone_();
}

std::shared_ptr<Peer> Host::attach(const Gid& gid, uint32_t block) {
  std::string why;
  auto node = PeerNode::open(gid, why, directory_, block);
  if (!node) {
    // Another host's GID: the wire, silently. A process of this host that cannot
    // be served is said once.
    if (!why.empty()) say_once("same-host peer reached by UDP: " + why);
    return nullptr;
  }
  // A process holding several blocks is one peer (one of its node's peer slots).
  for (const auto& [key, known] : peers_)
    if (known->node->file() == node->file() && known->usable()) return known;
  return attach_node(std::move(node));
}

std::shared_ptr<Peer> Host::attach_node(std::unique_ptr<PeerNode> node) {
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
  peer->doorbell = memory->copy_descriptor(node->header().doorbell_fd);
  peer->node = std::move(node);
  peer->memory = std::move(memory);
  peer->pages = std::make_unique<PeerPages>(*peer->memory, peer->node->header().pages_unshared);
  return peer;
}

}  // namespace softrdma::samehost
