// The node segment: what a softrdma process publishes so that processes of the
// same host can act as its RNIC's DMA engine (docs/decisions/same-host.md).
//
// `/dev/shm/softrdma-node-<netns>-<GID in hex>`, one name (hard link) per GID the device
// serves, created exclusively without following links, mode 0600: only processes
// of the same user open it, and those may reach the owner's memory anyway
// (cross-memory attach, process_memory.h). It holds
//   - a header: the owner's pid and a probe word that proves the pid is the owner;
//   - the R_Keys the owner's responder would honour, with their PD, rights and
//     range (published at ibv_reg_mr, a window's bind; revoked before ibv_dereg_mr
//     returns, after every access in flight through it ended);
//   - the owner's QPs: state, type, PD, remote access rights;
//   - a slot per peer process, through which revocation waits for its accesses;
//   - the lock every RNIC of the host takes for an ATOMIC (IBV_ATOMIC_HCA).
// The owner writes, peers read; peers trust nothing they read (published_table.h).
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "samehost/published_table.h"
#include "samehost/shared_pages.h"
#include "samehost/recv_queue.h"
#include "progress/wake_word.h"
#include "samehost/shared_queue.h"
#include "transport/transport.h"

namespace softrdma::samehost {

using transport::Gid;

// What an R_Key grants (IBA 10.6.3: an MR's or a bound memory window's rights).
struct KeyGrant {
  uint64_t host_addr = 0;  // where `iova` is in the owner's address space
  uint64_t iova = 0;
  uint64_t length = 0;
  uint32_t pd = 0;      // the owner's PD handle
  uint32_t access = 0;  // IBV_ACCESS_*
  uint32_t qpn = 0;     // a type 2 window: the only QP it serves; 0: any QP of the PD
  SharedSpan shared;    // its whole pages a peer may map (shared_pages.h); length 0: none
};

// What a peer needs to know of one of the owner's QPs.
struct QpGrant {
  uint32_t state = 0;  // ibv_qp_state
  uint32_t type = 0;   // ibv_qp_type
  uint32_t pd = 0;
  uint32_t access = 0;  // qp_access_flags
  uint32_t dest_qpn = 0;
  uint32_t recv_queue = 0;  // its RecvState's index + 1; 0: SENDs to it take the wire
  uint32_t min_rnr_timer = 0;  // IBA 9.7.5.2.8's encoding: how long an RNR waits
  uint32_t qkey = 0;  // UD: the Q_Key a message must carry (IBA 10.2.5)
  uint32_t xrcd = 0;  // XRC receive QP: its domain's handle (IBA A14)
};

// What a peer needs to know of one of the owner's XRC SRQs (IBA A14): an XRC
// request names the SRQ that receives it and whose PD checks its R_Key, which
// must be of the receive QP's domain.
struct SrqGrant {
  uint32_t pd = 0;
  uint32_t xrcd = 0;
  uint32_t recv_queue = 0;  // its RecvState's index + 1
};

// XRC SRQs are published in the QP table under their number with this bit set
// (QPNs and SRQNs have 24 bits, so the two never meet).
inline constexpr uint32_t kSrqKeyBit = 1u << 31;

inline constexpr char kNodeDirectory[] = "/dev/shm/";
inline constexpr uint64_t kNodeMagic = 0x45444f4e414d4452;  // "RDMANODE"
inline constexpr uint32_t kNodeVersion = 8;  // 2: receive queues; 3: loop_wake; 4: recv_sges;
                                             // 5: shared pages, recv_results; 6: SRQs;
                                             // 7: UD (Q_Key, RecvResult::src_qp); 8: XRC

struct NodeHeader {
  std::atomic<uint64_t> magic;  // written last, once the rest is
  uint32_t version;
  uint32_t pid;
  uint32_t uid;
  uint32_t key_capacity;
  uint32_t qp_capacity;
  uint32_t peer_capacity;
  uint64_t probe_addr;
  uint64_t probe_value;
  std::atomic<uint32_t> key_overflow;  // a key could not be published: use the wire
  std::atomic<uint32_t> serving;       // 1 until the owner closes its device
  int32_t doorbell_fd;                 // the owner's eventfd (its number there)
  // The owner's progress loop's wake-up words: a peer writes the doorbell only
  // when that loop sleeps (progress/wake_word.h).
  progress::WakeWord loop_wake;
  // Regions whose shared pages went back to private memory so far: a peer that
  // sees it move drops its mappings (PeerPages).
  std::atomic<uint64_t> pages_unshared;
  pthread_mutex_t atomics;             // robust, process-shared
  // Faults peers found while acting for the owner's QPs (a remote access error
  // ends the owner's QP too, IBA 9.9.3.1.2), drained by the owner's engine; each
  // is QPN | ibv_event_type << 32.
  SharedQueueHeader faults;
  // Receive queues peers placed messages in: RecvState indices, at most one
  // waiting per queue (RecvState::noticed), so the queue never fills.
  SharedQueueHeader notices;
};

using FaultQueue = SharedQueue<1>;
using NoticeQueue = SharedQueue<1>;

// A peer process's place in the owner's segment: `access` is odd while the peer
// is inside an access (NodeSegment::revoke_key waits for it to move on).
struct PeerSlot {
  std::atomic<uint32_t> pid;
  std::atomic<uint32_t> unused;
  std::atomic<uint64_t> access;
};

using KeyTable = PublishedTable<8>;
using QpTable = PublishedTable<4>;

// The segment's shape, the same for owner and peers.
struct NodeLayout {
  static constexpr uint32_t kKeys = 16384, kQps = 16384, kPeers = 256, kFaults = 256;
  static constexpr uint32_t kRecvQueues = 4096;
  static size_t keys_offset();
  static size_t qps_offset();
  static size_t peers_offset();
  static size_t faults_offset();
  static size_t recvs_offset();
  static size_t notices_offset();
  static size_t sges_offset();
  static size_t results_offset();
  static size_t size();
};

// The lock for ATOMICs: held by whichever RNIC of the host executes one, so that
// ATOMICs on one location are atomic with respect to each other (IBV_ATOMIC_HCA).
// A holder that died releases it (a robust mutex).
class AtomicsGuard {
 public:
  explicit AtomicsGuard(NodeHeader& header);
  ~AtomicsGuard();
  AtomicsGuard(const AtomicsGuard&) = delete;
  AtomicsGuard& operator=(const AtomicsGuard&) = delete;

 private:
  NodeHeader& header_;
};

// A mapped segment seen through its layout (owner and peers alike).
struct NodeView {
  void* base = nullptr;
  NodeHeader* header = nullptr;
  KeyTable keys;
  QpTable qps;
  PeerSlot* peers = nullptr;
  FaultQueue faults;
  RecvState* recvs = nullptr;  // NodeLayout::kRecvQueues of them
  NoticeQueue notices;
  RecvSge* recv_sges = nullptr;  // kSharedSges per receive queue
  RecvResult* recv_results = nullptr;  // kSharedSges per receive queue
  // The segment mapped at `base` (NodeLayout::size() bytes).
  static NodeView at(void* base);
};

// The owner's side.
class NodeSegment {
 public:
  // Creates the segment under every name of `gids` in `directory` (tests use
  // their own); null and why when it cannot. On an address shared by the host's
  // processes (docs/decisions/host-rnic.md) a GID names several processes: the
  // segment is then named by GID and QPN block, one name per block of `blocks`
  // (empty: the GID alone names it).
  static std::unique_ptr<NodeSegment> create(std::span<const Gid> gids, std::string& why,
                                             const std::string& directory = kNodeDirectory,
                                             std::span<const uint32_t> blocks = {});
  ~NodeSegment();  // unlinks every name
  // A shared address's process took QPN block `block`: the segment gets its names
  // (peers find the owner of a QPN by them). Returns the names added.
  std::vector<std::string> add_block(uint32_t block);
  NodeSegment(const NodeSegment&) = delete;
  NodeSegment& operator=(const NodeSegment&) = delete;

  void publish_key(uint32_t key, const KeyGrant& grant);
  // After it returns no peer reaches memory through `key` (ibv_dereg_mr(3)).
  void revoke_key(uint32_t key);
  void publish_qp(uint32_t qpn, const QpGrant& grant);
  void remove_qp(uint32_t qpn);
  void publish_xrc_srq(uint32_t srqn, const SrqGrant& grant);
  void remove_xrc_srq(uint32_t srqn) { remove_qp(srqn | kSrqKeyBit); }
  // The next fault a peer reported (QPN and ibv_event_type); false when none.
  bool take_fault(uint32_t& qpn, uint32_t& event);
  bool faults_pending() const { return !view_.faults.empty(); }
  NodeHeader& header() { return *view_.header; }

  // A receive queue for QP `qpn` that peers may consume (closed until open_recv);
  // null when all are in use (SENDs to that QP then take the wire).
  RecvState* reserve_recv(uint32_t& index);
  void release_recv(uint32_t index);
  // Where receive queue `index` may keep a copy of its scatter lists (kSharedSges).
  RecvSge* recv_sges(uint32_t index) { return view_.recv_sges + size_t(index) * kSharedSges; }
  // And of its WQEs' results (a slot each; a queue of at most kSharedSges slots).
  RecvResult* recv_results(uint32_t index) {
    return view_.recv_results + size_t(index) * kSharedSges;
  }
  // Stops peers claiming from `state` and waits for those inside an access, so
  // that what they placed is final (a QP entering Error or Reset, or destroyed).
  void close_recv(RecvState& state);
  // The next receive queue a peer left a notice for; false when none.
  bool take_notice(uint32_t& index);
  bool notices_pending() const { return !view_.notices.empty(); }
  const std::vector<std::string>& names() const { return names_; }
  // Returns once every peer access that began before the call ended: what it
  // looked up before (a QP's state published just now, say) is no longer acted on.
  void wait_for_accesses();
  // Whether WQE `index` of a queue of many senders, claimed and not marked
  // complete (`result.seq`), never will be: a peer claims, places and marks (or
  // voids) inside one access, so when no living peer is inside one and the mark
  // is still missing, its claimer died in the middle (a SIGKILL).
  bool claim_abandoned(RecvResult& result, uint32_t index) const;

 private:
  NodeSegment() = default;
  // Replaces a published entry in place, or adds one while the table has room;
  // past its capacity the QP is not published (peers reach it over UDP).
  void publish_qp_entry(uint32_t key, const QpTable::Value& value);

  // Links `name` to the segment's first name; false when it could not be.
  bool add_name(const std::string& name);

  NodeView view_;
  std::vector<Gid> gids_;
  std::string directory_;
  std::vector<std::string> names_;
  std::vector<uint32_t> free_recvs_;  // RecvState indices not in use
  // The keys live in view_.qps (QPNs, and SRQNs with kSrqKeyBit): a QP never
  // published, or one past the table's capacity, costs no walk of the table.
  std::unordered_set<uint32_t> published_qps_;
  pid_t creator_ = 0;        // a forked child must not unlink its parent's names
  uint64_t probe_word_ = 0;  // the word peers read to prove who they reach
};


// The pid a segment file names (0: not a finished segment of this layout).
pid_t node_segment_owner(int fd);
// A process of that pid runs or may run again (EPERM: one of another user). A
// zombie does not: it exited and only waits for its parent to reap it, and an
// access it had begun will never end (kill(2) alone would call it alive).
bool process_exists(pid_t pid);
// The inode of this process's network namespace (/proc/self/ns/net; 0 unknown).
uint64_t network_namespace();
// `<directory>softrdma-node-<netns>-<hex>` for a GID in this process's network
// namespace; with a QPN block (a shared address's), `...-<hex>-block<N>`. A GID
// is an address of one namespace: a process of another namespace that uses the
// same address is another "host", reached through that namespace's network (its
// routes and filters apply), never through shared memory (host-rnic.md).
std::string node_name(const Gid& gid, const std::string& directory = kNodeDirectory,
                      uint32_t block = 0);
// Removes this user's node segments whose owner has exited (a killed process
// runs no destructor); returns how many were removed.
int remove_stale_node_segments(const std::string& directory = kNodeDirectory);

}  // namespace softrdma::samehost
