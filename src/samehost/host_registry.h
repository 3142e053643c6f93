// The processes of one host address that share it as one RNIC (issue 27,
// docs/decisions/host-rnic.md): a shared-memory segment per address and network
// namespace, of one user, that gives each process a slot (the top bits of its
// QPNs and CM Comm IDs), records which index its UDP 4791 socket has in the
// address's SO_REUSEPORT group (learned by probes), and which slot listens on
// which CM ServiceID. Whoever joins first creates it; a process that dies leaves
// its slot to be reaped by the next that looks.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wire/ip_udp.h"

namespace softrdma::samehost {

// Slot 0 is nobody's (QPN 0 and 1), nor is the last: its block holds QPN 0xFFFFFF,
// the multicast QPN (IBA 10.5.2.3).
inline constexpr uint32_t kRegistrySlots = 1024;
inline constexpr uint32_t kRegistryListeners = 512;
inline constexpr int32_t kIndexUnknown = -1;
inline constexpr char kRegistryPrefix[] = "softrdma-host-";

// The header's magic, version and uid, and each member's pid and start_time, keep
// their places in every version (a file of another version is read for liveness).
struct RegistryMember {
  std::atomic<int32_t> pid{0};        // 0: free
  std::atomic<int32_t> index{kIndexUnknown};  // its socket's index in the group
  uint64_t start_time = 0;            // /proc/PID/stat's, against pid reuse
  std::atomic<uint32_t> primary{0};   // the process's first slot: its hand-over's name
  // Set by a member that handed this slot's process something (after the send),
  // cleared by that process before it reads: its poller reads the hand-over only
  // when set, not with a system call on every empty poll (transport/udp/handover.h).
  std::atomic<uint32_t> handover_doorbell{0};
};
static_assert(sizeof(RegistryMember) == 24, "the layout of kRegistryVersion");

struct RegistryListener {
  uint64_t service_id = 0;
  uint32_t slot = 0;  // 0: free
  uint32_t reserved = 0;
};

struct RegistryHeader {
  std::atomic<uint64_t> magic{0};   // written last by the creator
  uint32_t version = 0;
  uint32_t uid = 0;
  pthread_mutex_t lock;             // robust, process-shared: changes of membership
  std::atomic<uint64_t> generation{0};  // bumped by every change of membership
  std::atomic<uint64_t> probe_nonce{0};
};

class HostRegistry {
 public:
  struct Member {
    uint32_t slot = 0;
    pid_t pid = 0;
    int32_t index = kIndexUnknown;
  };

  // Called, under the registry's lock, by a process that finds itself the only
  // live member: "" to go on, else why it must not join (the slot is given back).
  // Under the lock, because no other process joins, and so binds its socket,
  // while it runs: a check that binds the port for an instant cannot fail
  // another's bind, and another's socket is never taken for an unknown one.
  using AloneCheck = std::function<std::string()>;

  // Joins the registry of `address` in this network namespace (created when it is
  // the first), taking a free slot. Null and why when it cannot: another user's
  // registry (the kernel would refuse this user's socket in the group anyway), all
  // slots held by live processes, no shared memory, `alone_check`'s refusal.
  static std::unique_ptr<HostRegistry> join(const wire::Gid& address, std::string& why,
                                            const std::string& directory = "/dev/shm/",
                                            const AloneCheck& alone_check = {});
  ~HostRegistry();  // gives the slot back and its listeners
  HostRegistry(const HostRegistry&) = delete;
  HostRegistry& operator=(const HostRegistry&) = delete;

  uint32_t slot() const { return slot_; }  // the first of this process's slots
  // Another slot for this process (its QPNs' next block, wire/qpn_blocks.h): 0 when
  // all are held by live processes.
  uint32_t take_another_slot();
  const std::vector<uint32_t>& slots() const { return slots_; }
  // This process's first slot cannot be used (its hand-over name is still bound by
  // a copy of a gone process's socket): another becomes the first, and the old one
  // stays held, so nobody else meets the same name, until this process leaves.
  // False when no slot is free.
  bool move_to_another_slot();
  const std::string& path() const { return path_; }

  // What a probe said: this process's socket has `index` in the group (all its slots).
  void set_index(int32_t index);
  // Live members (dead ones reaped first). The generation moves on with each change.
  std::vector<Member> members();
  uint64_t generation() const { return header_->generation.load(std::memory_order_acquire); }
  // A fresh nonce for a round of probes (members then read probes of it only).
  uint64_t new_probe_round();
  uint64_t probe_nonce() const { return header_->probe_nonce.load(std::memory_order_acquire); }
  // Frees the slots of processes that are gone; true when any was.
  bool reap();
  // Removes this user's registry files in `directory` whose members are all gone
  // (processes that were killed leave theirs; a network namespace's file stays
  // after the namespace). Returns how many were removed.
  static int remove_abandoned(const std::string& directory = "/dev/shm/");
  // How many live processes of this user serve `address` in this network
  // namespace, read without joining or changing the registry (`softrdma doctor`);
  // 0 when there is no registry of this user's for it.
  static int live_processes(const wire::Gid& address, const std::string& directory = "/dev/shm/");
  // The live process serving `slot`, if any.
  std::optional<pid_t> owner(uint32_t slot) const;
  // The slot whose hand-over socket takes the packets of QPN block `block` (its
  // process's first slot); 0 when nobody holds it. No liveness check: per packet.
  // The hand-over doorbells, one per slot (RegistryMember::handover_doorbell), in
  // the shared file: what transport/udp/handover.h rings and reads.
  std::atomic<uint32_t>* doorbell(uint32_t slot) const {
    return slot < kRegistrySlots ? &members_[slot].handover_doorbell : nullptr;
  }
  uint32_t handover_slot(uint32_t block) const {
    if (block == 0 || block >= kRegistrySlots) return 0;
    if (members_[block].pid.load(std::memory_order_acquire) == 0) return 0;
    return members_[block].primary.load(std::memory_order_acquire);
  }

  // CM listeners (IBA 12.6.5: a REQ names the ServiceID it wants). False when
  // another slot listens there already, or the table is full.
  bool add_listener(uint64_t service_id);
  void remove_listener(uint64_t service_id);
  // The slot listening on `service_id`, 0 when none.
  uint32_t listener(uint64_t service_id) const;

 private:
  HostRegistry() = default;
  class Locked;
  // The registry file `fd` (owned from now on) mapped; null and why.
  static std::unique_ptr<HostRegistry> map(int fd, const std::string& path, std::string& why);
  // This user's finished registry file at `path`, mapped, joined by nobody; null
  // when there is none, it is another user's, or it is still being made.
  static std::unique_ptr<HostRegistry> map_finished(const std::string& path);
  // A registry this process did not join: unlinked when no member is alive.
  bool unlink_if_abandoned();
  bool alive(const RegistryMember& member) const;
  // A file of another layout version: whether any member it names is alive.
  bool another_version_alive() const;
  // Under the lock: a free slot for this process. False with `why` empty when the
  // file was unlinked meanwhile (join tries again), with `why` when all are held.
  bool take_slot(std::string& why, const AloneCheck& alone_check);
  bool alone_locked() const;  // no member but the slot just taken
  // Under the lock: the first free slot, now this process's; 0 when none is free.
  uint32_t claim_free_slot_locked();
  bool reap_locked();

  std::string path_;
  int fd_ = -1;  // kept: the last one out unlinks the path only while it is this file
  void* base_ = nullptr;
  size_t size_ = 0;
  RegistryHeader* header_ = nullptr;
  RegistryMember* members_ = nullptr;
  RegistryListener* listeners_ = nullptr;
  uint32_t slot_ = 0;
  std::vector<uint32_t> slots_;  // slot_ first
};

// The registry's file name for `address` in the network namespace `netns` (the
// inode of /proc/self/ns/net): namespaces that reuse one address share no registry.
std::string registry_name(const wire::Gid& address, uint64_t netns, const std::string& directory);
// /proc/PID/stat's start time (field 22), 0 when the process is gone.
uint64_t process_start_time(pid_t pid);

}  // namespace softrdma::samehost
