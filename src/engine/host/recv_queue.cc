#include "engine/host/recv_queue.h"

#include <cstddef>
#include <cstring>

#include "samehost/host.h"

namespace softrdma::engine::host {

static_assert(sizeof(Sge) == sizeof(samehost::RecvSge) &&
                  offsetof(Sge, addr) == offsetof(samehost::RecvSge, addr) &&
                  offsetof(Sge, length) == offsetof(samehost::RecvSge, length) &&
                  offsetof(Sge, lkey) == offsetof(samehost::RecvSge, lkey),
              "peers read the receive SGEs in this layout");

bool HostRecvQueue::reserve(samehost::Host& host, uint32_t kind, uint32_t pd, uint32_t slots,
                            uint32_t max_sge, const Sge* sges) {
  uint32_t index = 0;
  samehost::RecvState* state = host.node().reserve_recv(index);
  if (state == nullptr) return false;
  host_ = &host;
  state_ = state;
  index_ = index;
  const bool many = kind != samehost::RecvState::kQueue;
  own_results_.assign(many ? 0 : slots, samehost::RecvResult{});
  // A small queue keeps its scatter lists in the segment too: a peer then reads
  // them with a load, not a process_vm_readv (1.9 µs here; docs/performance.md).
  // Its results too, which peers then write with stores.
  const bool shared = size_t(slots) * max_sge <= samehost::kSharedSges;
  sges_ = shared ? host.node().recv_sges(index) : nullptr;
  results_ = shared || many ? host.node().recv_results(index) : own_results_.data();
  // Results of an earlier queue at this index must not look complete to this one.
  if (many) clear_results(slots);
  samehost::describe(*state, {kind, pd, slots, max_sge, reinterpret_cast<uintptr_t>(sges),
                              many ? 0 : reinterpret_cast<uintptr_t>(own_results_.data()), shared});
  return true;
}

void HostRecvQueue::release() {
  if (state_ == nullptr) return;
  host_->node().release_recv(index_);
  state_->shared_sges.store(0, std::memory_order_relaxed);
  state_ = nullptr;
  sges_ = nullptr;
  results_ = nullptr;
}

void HostRecvQueue::close() {
  if (state_ != nullptr) host_->node().close_recv(*state_);
}

void HostRecvQueue::clear_results(uint32_t slots) {
  std::memset(static_cast<void*>(results_), 0, sizeof(samehost::RecvResult) * slots);
}

bool HostRecvQueue::take_result(uint32_t index, uint32_t slot, samehost::RecvResult& out) {
  return stuck_.take_result(host_->node(), results_[slot], index, out);
}

}  // namespace softrdma::engine::host
