#include "runtime/shared_address.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <map>
#include <vector>

#include "samehost/node_segment.h"
#include "transport/udp/udp_socket.h"
#include "wire/cm_gsi.h"
#include "wire/cm_route.h"
#include "wire/packet.h"

namespace softrdma::runtime {

namespace {

int64_t coarse_now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

// The hand-over slot of the process a packet to QP1 is for (wire/cm_route.h): the
// listener's for a request, the Communication ID's chooser for an answer; 0 when
// that is this process, or nobody (this process's CM then answers a request with
// REJ "invalid ServiceID", as a host with no listener does, and drops an answer).
uint32_t mad_slot(const samehost::HostRegistry& registry, std::span<uint8_t> packet) {
  wire::PacketView view;
  if (wire::parse_packet(packet, view) != wire::ParseError::kNone) return 0;
  const wire::CmRoute route = wire::cm_route(wire::gsi_mad(view));
  uint32_t slot = 0;
  if (route.by == wire::CmRoute::By::kServiceId) {
    slot = registry.listener(route.service_id);
  } else if (route.by == wire::CmRoute::By::kCommId) {
    slot = registry.handover_slot(wire::comm_id_slot(route.comm_id));
  }
  return slot == registry.slot() ? 0 : slot;
}

// SOFTRDMA_SHARE_ADDRESS=crossed: each slot to the socket of the next process
// (by index) that has another, so that every packet lands at a process that must
// hand it over. Nothing changes with one process: there is no other.
void cross(std::vector<transport::udp::SlotIndex>& members) {
  std::set<uint32_t> indices;
  for (const transport::udp::SlotIndex& m : members) indices.insert(m.index);
  if (indices.size() < 2) return;
  for (transport::udp::SlotIndex& m : members) {
    auto next = indices.upper_bound(m.index);
    m.index = next == indices.end() ? *indices.begin() : *next;
  }
}

}  // namespace

std::unique_ptr<SharedAddress> SharedAddress::join(const wire::Gid& address, std::string& error,
                                                   bool crossed) {
  std::unique_ptr<SharedAddress> shared(new SharedAddress);
  shared->crossed_ = crossed;
  // Alone in the registry, the address's port must be free: sockets already there
  // belong to processes this registry does not know, which could not be steered to
  // (another /dev/shm in this network namespace, as a container on the host's
  // network has; another user; a kernel RoCE device).
  const auto port_free = [&address]() -> std::string {
    if (!transport::udp::port_held(address, wire::kRoceUdpPort)) return "";
    return "softrdma: UDP port 4791 on " + transport::udp::address_to_string(address) +
           " is held by processes this one cannot share it with (another user's, or ones "
           "with another /dev/shm, as a container on the host's network has, or a kernel "
           "RoCE device): `ss -ulpn sport = :4791` names them";
  };
  shared->registry_ =
      samehost::HostRegistry::join(address, error, samehost::kNodeDirectory, port_free);
  if (!shared->registry_) return nullptr;
  // A slot whose hand-over name is still bound (a copy of a gone holder's socket
  // lives on in a process softrdma did not fork, or in an older softrdma's child)
  // is kept aside and another taken, a few times.
  for (int tries = 0; tries < 4 && !shared->handover_; ++tries) {
    int bind_error = 0;
    shared->handover_ = transport::udp::Handover::open(
        shared->registry_->path(), shared->registry_->slot(), error, &bind_error);
    if (!shared->handover_ && (bind_error != EADDRINUSE || !shared->registry_->move_to_another_slot()))
      break;
  }
  if (!shared->handover_) return nullptr;
  error.clear();
  samehost::HostRegistry* registry = shared->registry_.get();
  shared->handover_->set_doorbells([registry](uint32_t slot) { return registry->doorbell(slot); });
  SharedAddress* raw = shared.get();
  shared->hooks_.probe_nonce = [registry] { return registry->probe_nonce(); };
  shared->hooks_.learned_index = [registry, raw](uint32_t index) {
    registry->set_index(int32_t(index));
    raw->learned_.store(true, std::memory_order_release);
  };
  shared->hooks_.handover = shared->handover_.get();
  shared->hooks_.handover_slot = [registry](uint32_t block) { return registry->handover_slot(block); };
  shared->hooks_.mad_slot = [registry](std::span<uint8_t> packet) {
    return mad_slot(*registry, packet);
  };
  return shared;
}

void SharedAddress::start(transport::UdpTransport& transport) {
  transport_ = &transport;
  transport.own_block(registry_->slot());
  seen_generation_.store(registry_->generation(), std::memory_order_relaxed);
  steer();  // the probe rule, and the members known so far
  probe();
}

// A round of probes, one per member process: each learns its socket's index.
void SharedAddress::probe() {
  seen_members_.clear();
  for (const samehost::HostRegistry::Member& m : registry_->members()) seen_members_.insert(m.pid);
  transport_->send_probes(uint32_t(seen_members_.size()), registry_->new_probe_round());
}

// The program for the members whose index is known (any member may attach it; the
// group keeps the last).
void SharedAddress::steer() {
  std::vector<transport::udp::SlotIndex> members;
  for (const samehost::HostRegistry::Member& m : registry_->members())
    if (m.index >= 0) members.push_back({m.slot, uint32_t(m.index)});
  if (crossed_) cross(members);
  transport_->steer(members);
}

int SharedAddress::claim_service(uint64_t service_id) {
  return registry_->add_listener(service_id) ? 0 : EADDRINUSE;
}

void SharedAddress::release_service(uint64_t service_id) { registry_->remove_listener(service_id); }

uint32_t SharedAddress::take_qpn_block() {
  if (!first_block_given_) {
    first_block_given_ = true;
    return registry_->slot();
  }
  const uint32_t block = registry_->take_another_slot();
  if (block != 0 && transport_ != nullptr) transport_->own_block(block);
  return block;
}

// Joins, leaves and deaths change who is in the group and so every index: probe
// again. Learned indices and new blocks change only the program.
void SharedAddress::after_turn() {
  if (transport_ == nullptr) return;
  // Every turn of every thread comes here: the common one (nothing learned, the
  // registry unchanged, no reap due) costs three loads and a coarse clock read.
  const int64_t now = coarse_now_ms();
  if (!learned_.load(std::memory_order_acquire) &&
      registry_->generation() == seen_generation_.load(std::memory_order_relaxed) &&
      now < next_reap_ms_.load(std::memory_order_relaxed))
    return;
  std::unique_lock lock(after_turn_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  const bool learned = learned_.exchange(false, std::memory_order_acq_rel);
  if (now >= next_reap_ms_.load(std::memory_order_relaxed)) {
    next_reap_ms_.store(now + 1000, std::memory_order_relaxed);
    registry_->reap();
    // A round whose probes went stale (another round began while they were in
    // flight) taught this socket nothing, and only a change of members starts the
    // next: a member that still does not know its index after a second asks again.
    for (const samehost::HostRegistry::Member& m : registry_->members())
      if (m.slot == registry_->slot() && m.index < 0) {
        probe();
        return;
      }
  }
  const uint64_t generation = registry_->generation();
  if (!learned && generation == seen_generation_.load(std::memory_order_relaxed)) return;
  seen_generation_.store(generation, std::memory_order_relaxed);
  std::set<pid_t> members;
  uint32_t lowest_slot = UINT32_MAX;
  for (const samehost::HostRegistry::Member& m : registry_->members()) {
    members.insert(m.pid);
    lowest_slot = std::min(lowest_slot, m.slot);
  }
  if (members != seen_members_) {
    // One round per change, not one per member (N members each probing N indices,
    // each round's nonce making the others' probes stale): a joiner probes as it
    // starts, and after a leave or a death the member of the lowest slot does.
    if (registry_->slot() == lowest_slot) {
      probe();
      return;  // the program follows once indices are learned
    }
    seen_members_ = std::move(members);
  }
  steer();
}

}  // namespace softrdma::runtime
