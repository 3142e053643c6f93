#include "samehost/peer_node.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "samehost/grant_codec.h"

namespace softrdma::samehost {

std::unique_ptr<PeerNode> PeerNode::open(const Gid& gid, std::string& why,
                                         const std::string& directory, uint32_t block) {
  const std::string name = node_name(gid, directory, block);
  const int fd = ::open(name.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    why = errno == ENOENT   ? ""  // no softrdma process of this host serves that GID
          : errno == EACCES ? "its node segment belongs to another user (cross-memory "
                              "attach needs the same user)"
                            : name + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  const pid_t pid = node_segment_owner(fd);
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      size_t(st.st_size) != NodeLayout::size() || pid == 0) {
    close(fd);
    why = name + " is not a node segment of this user and layout";
    return nullptr;
  }
  void* base = mmap(nullptr, NodeLayout::size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    why = name + ": mmap: " + std::strerror(errno);
    return nullptr;
  }
  std::unique_ptr<PeerNode> peer(new PeerNode);
  peer->view_ = NodeView::at(base);
  peer->pid_ = pid;
  peer->file_ = {st.st_dev, st.st_ino};
  peer->probe_addr_ = peer->view_.header->probe_addr;
  peer->probe_value_ = peer->view_.header->probe_value;
  return peer;
}

PeerNode::~PeerNode() {
  // A forked child's copy must not free the slot its parent still uses.
  if (slot_ != nullptr && slot_->pid.load(std::memory_order_relaxed) == uint32_t(getpid())) {
    slot_->access.store(0, std::memory_order_release);
    slot_->pid.store(0, std::memory_order_release);
  }
  if (view_.base != nullptr) munmap(view_.base, NodeLayout::size());
}

std::optional<KeyGrant> PeerNode::key(uint32_t rkey) const {
  auto v = view_.keys.get(rkey);
  if (!v) return std::nullopt;
  return decode_key(*v);
}

std::optional<QpGrant> PeerNode::qp(uint32_t qpn) const {
  auto v = view_.qps.get(qpn);
  if (!v) return std::nullopt;
  return decode_qp(*v);
}

std::optional<SrqGrant> PeerNode::xrc_srq(uint32_t srqn) const {
  auto v = view_.qps.get(srqn | kSrqKeyBit);
  if (!v) return std::nullopt;
  const QpGrant g = decode_qp(*v);
  return SrqGrant{g.pd, g.xrcd, g.recv_queue};
}

bool PeerNode::join() {
  if (slot_ != nullptr) return true;
  const uint32_t self = uint32_t(getpid());
  for (uint32_t i = 0; i < NodeLayout::kPeers; ++i) {
    PeerSlot& slot = view_.peers[i];
    uint32_t holder = slot.pid.load(std::memory_order_acquire);
    // A slot whose process exited is free again.
    if (holder != 0 && process_exists(pid_t(holder))) continue;
    if (!slot.pid.compare_exchange_strong(holder, self)) continue;
    slot.access.store(0, std::memory_order_release);
    slot_ = &slot;
    return true;
  }
  return false;
}

void PeerNode::begin_access() {
  slot_->access.store(slot_->access.load(std::memory_order_relaxed) + 1,
                      std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool PeerNode::report_fault(uint32_t qpn, uint32_t event) {
  return view_.faults.push({uint64_t(qpn) | uint64_t(event) << 32});
}

RecvState* PeerNode::recv(uint32_t recv_queue) const {
  if (recv_queue == 0 || recv_queue > NodeLayout::kRecvQueues) return nullptr;
  return &view_.recvs[recv_queue - 1];
}

const RecvSge* PeerNode::recv_sges(uint32_t recv_queue) const {
  if (recv_queue == 0 || recv_queue > NodeLayout::kRecvQueues) return nullptr;
  return view_.recv_sges + size_t(recv_queue - 1) * kSharedSges;
}

RecvResult* PeerNode::recv_results(uint32_t recv_queue) const {
  if (recv_queue == 0 || recv_queue > NodeLayout::kRecvQueues) return nullptr;
  return view_.recv_results + size_t(recv_queue - 1) * kSharedSges;
}

// Dekker with the owner's Qp::drain_host_receives, which clears `noticed` before
// it reads `placed`: either this sees the notice still waiting, or the owner's
// read sees what was placed before it.
bool PeerNode::notice(uint32_t recv_queue) {
  RecvState* state = recv(recv_queue);
  if (state == nullptr || state->noticed.exchange(1, std::memory_order_seq_cst) != 0)
    return false;
  return view_.notices.push({recv_queue - 1});
}

void PeerNode::end_access() {
  slot_->access.store(slot_->access.load(std::memory_order_relaxed) + 1,
                      std::memory_order_release);
}

}  // namespace softrdma::samehost
