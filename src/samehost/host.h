// The same-host path (docs/decisions/same-host.md): this process's node segment,
// which lets processes of the host act as its RNIC's DMA engine, and the peers it
// acts for in turn. The engine asks `peer(gid)` when a QP connects: a peer means
// the QP's operations are executed here against the peer's memory; null means the
// wire (another host, another user, a process forced to UDP, or cross-memory
// attach refused, which is said once, in one line).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>

#include "samehost/node_segment.h"
#include "samehost/peer_node.h"
#include "samehost/process_memory.h"
#include "samehost/shared_pages.h"

namespace softrdma::samehost {

// Another softrdma process of this host, reached as its DMA engine.
struct Peer {
  std::unique_ptr<PeerNode> node;
  std::unique_ptr<ProcessMemory> memory;
  int doorbell = -1;  // the peer's doorbell (pidfd_getfd(2)); -1 without one
  // Its registered regions' shared pages, mapped here (after node and memory,
  // which it uses: destroyed first).
  std::unique_ptr<PeerPages> pages;
  ~Peer();
  // Wakes the peer's progress thread (it has faults or notices to take), by its
  // loop's protocol: true when it was asleep and the doorbell was written.
  bool ring() const;
  bool usable() const { return node->serving() && memory->alive(); }
  // The same with the kernel asked at most once a millisecond (alive_lately), for
  // a send path that checks a remembered peer before each message.
  bool usable_lately() const { return node->serving() && memory->alive_lately(); }
};

// Yama's ptrace_scope 1 admits only descendants as tracers: this names every
// process as one, so that the same user's peers may reach this one by
// cross-memory attach (Host::open does it; `softrdma doctor` probes with it).
void allow_same_user_peers();

class Host {
 public:
  // Publishes this process's node segment under `gids` (and, on a shared address,
  // under each QPN block of `blocks`); null and why when it cannot.
  static std::unique_ptr<Host> open(std::span<const Gid> gids, std::string& why,
                                    const std::string& directory = kNodeDirectory,
                                    std::span<const uint32_t> blocks = {});
  ~Host();
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  NodeSegment& node() { return *node_; }
  // Names of node segments left by this user's exited processes that open
  // removed (`softrdma status` reports them).
  int stale_removed_at_open() const { return stale_removed_at_open_; }
  // The eventfd peers write after reporting a fault: the progress loop's own wake
  // descriptor, which it drains (-1 without a progress thread: faults are then
  // taken at the next poll).
  void set_doorbell(int fd) { node_->header().doorbell_fd = fd; }
  // Engine owner, each turn: a few loads when nothing was reported.
  bool faults_pending() const { return node_->faults_pending(); }
  // Engine owner: hands each fault peers reported to `take` (QPN, ibv_event_type).
  void take_faults(const std::function<void(uint32_t, uint32_t)>& take);
  // The process serving QP `qpn` at `gid` on this host, if this process may act
  // for it; the same object while that process lives. On a shared address the
  // QPN's block names the process (host-rnic.md). Cold path (QP connection).
  std::shared_ptr<Peer> peer(const Gid& gid, uint32_t qpn);
  // A peer's process was found gone (a QP failed because of it): what it left in
  // /dev/shm goes now, not at the next device opened somewhere — its node segment
  // here, and whatever `on_peer_gone` removes (the runtime: status segments).
  void peer_gone();
  void set_on_peer_gone(std::function<void()> fn) { on_peer_gone_ = std::move(fn); }

 private:
  Host() = default;
  // By GID and QPN block (0: the GID alone): a shared address's process is known
  // by each of its blocks.
  using PeerKey = std::pair<Gid, uint32_t>;
  // Under peers_mutex_: the live peer cached under `key`, dropping a dead one.
  std::shared_ptr<Peer> cached(const PeerKey& key);
  std::shared_ptr<Peer> attach(const Gid& gid, uint32_t block);
  std::shared_ptr<Peer> attach_node(std::unique_ptr<PeerNode> node);

  std::unique_ptr<NodeSegment> node_;
  std::string directory_;
  int stale_removed_at_open_ = 0;
  std::function<void()> on_peer_gone_;
  std::mutex peers_mutex_;
  std::map<PeerKey, std::shared_ptr<Peer>> peers_;
};

// Says once per process and reason, on stderr, why a peer is reached by the wire.
void say_once(const std::string& line);

}  // namespace softrdma::samehost
