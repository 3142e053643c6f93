#include "transport/fake/fake_network.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>

#include "wire/icrc.h"
#include "wire/opcodes.h"
#include "wire/qpn_blocks.h"

namespace softrdma::transport::fake {

namespace {

constexpr size_t kMinRoceBytes = wire::kBthBytes + wire::kIcrcBytes;

wire::IpUdpInfo fake_ip_udp(const Gid& src, const Gid& dst, uint16_t src_port) {
  // What softrdma's UDP transport puts on the wire: ID 0 with DF (docs/decisions/
  // transport.md), so the fake's ICRC is the one a real peer would compute.
  return wire::IpUdpInfo{.src = src, .dst = dst, .src_port = src_port,
                         .dst_port = wire::kRoceUdpPort, .ipv4_id = 0, .ipv4_df = true};
}

}  // namespace

std::string_view to_string(Fate fate) {
  switch (fate) {
    case Fate::kDelivered: return "delivered";
    case Fate::kDropped: return "dropped";
    case Fate::kHeld: return "held";
    case Fate::kDuplicated: return "duplicated";
    case Fate::kUndeliverable: return "undeliverable";
    case Fate::kMarked: return "marked CE";
  }
  return "?";
}

// PacketView reads and writes; this view is only read through (the const accessors).
wire::PacketView FakePacket::view() const {
  return wire::PacketView(std::span<uint8_t>(const_cast<uint8_t*>(bytes.data()), bytes.size()));
}

std::string FakePacket::summary() const {
  const std::string_view name = wire::kOpcodes[opcode()].name;
  char text[160];
  std::snprintf(text, sizeof text, "#%llu %.*s qp=0x%06x psn=%u (%zu B, %s)",
                static_cast<unsigned long long>(sequence), int(name.size()), name.data(),
                dest_qp(), psn(), bytes.size(), std::string(to_string(fate)).c_str());
  return text;
}

namespace match {
PacketMatcher any() {
  return [](const FakePacket&) { return true; };
}
PacketMatcher opcode(uint8_t opcode) {
  return [opcode](const FakePacket& p) { return p.opcode() == opcode; };
}
PacketMatcher psn(uint32_t psn) {
  return [psn](const FakePacket& p) { return p.psn() == psn; };
}
PacketMatcher dest_qp(uint32_t qpn) {
  return [qpn](const FakePacket& p) { return p.dest_qp() == qpn; };
}
PacketMatcher from(const Gid& src) {
  return [src](const FakePacket& p) { return p.src == src; };
}
PacketMatcher to(const Gid& dst) {
  return [dst](const FakePacket& p) { return p.dst == dst; };
}
PacketMatcher all_of(std::vector<PacketMatcher> matchers) {
  return [matchers = std::move(matchers)](const FakePacket& p) {
    return std::all_of(matchers.begin(), matchers.end(), [&p](const auto& m) { return m(p); });
  };
}
}  // namespace match

Gid ipv4_gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return wire::gid_from_ipv4(uint32_t(a) << 24 | uint32_t(b) << 16 | uint32_t(c) << 8 | d);
}

// ---- FakeNetwork ----

FakeNetwork::~FakeNetwork() { assert(endpoints_.empty() && "FakeTransports outlive the network"); }

std::unique_ptr<FakeTransport> FakeNetwork::attach(const Gid& gid, uint32_t qpn_block) {
  std::lock_guard lock(mutex_);
  std::vector<Endpoint>& at = endpoints_[gid];
  assert((at.empty() || (qpn_block != 0 && at.front().qpn_block != 0)) &&
         "one FakeTransport per GID, unless each names its QPN block");
  auto transport = std::unique_ptr<FakeTransport>(new FakeTransport(*this, gid));
  at.push_back(Endpoint{qpn_block, transport.get()});
  return transport;
}

void FakeNetwork::detach(FakeTransport* transport) {
  std::lock_guard lock(mutex_);
  auto it = endpoints_.find(transport->local_gid());
  if (it == endpoints_.end()) return;
  for (auto group = groups_.begin(); group != groups_.end();) {
    group->second.erase(transport);
    group = group->second.empty() ? groups_.erase(group) : std::next(group);
  }
  std::erase_if(it->second, [transport](const Endpoint& e) { return e.transport == transport; });
  if (it->second.empty()) endpoints_.erase(it);
}

void FakeNetwork::add_rule(PacketMatcher matcher, Fate fate, size_t count) {
  std::lock_guard lock(mutex_);
  rules_.push_back(Rule{std::move(matcher), fate, count});
}
void FakeNetwork::drop(PacketMatcher matcher, size_t count) {
  add_rule(std::move(matcher), Fate::kDropped, count);
}
void FakeNetwork::duplicate(PacketMatcher matcher, size_t count) {
  add_rule(std::move(matcher), Fate::kDuplicated, count);
}
void FakeNetwork::mark(PacketMatcher matcher, size_t count) {
  add_rule(std::move(matcher), Fate::kMarked, count);
}
void FakeNetwork::hold(PacketMatcher matcher, size_t count) {
  add_rule(std::move(matcher), Fate::kHeld, count);
}
void FakeNetwork::clear_rules() {
  std::lock_guard lock(mutex_);
  rules_.clear();
}

std::vector<FakePacket> FakeNetwork::held() const {
  std::lock_guard lock(mutex_);
  return held_;
}
size_t FakeNetwork::held_count() const {
  std::lock_guard lock(mutex_);
  return held_.size();
}

void FakeNetwork::release_held() {
  std::lock_guard lock(mutex_);
  std::vector<FakePacket> packets = std::move(held_);
  held_.clear();
  for (FakePacket& p : packets) deliver_locked(std::move(p));
}

void FakeNetwork::release_held_reversed() {
  std::lock_guard lock(mutex_);
  std::vector<FakePacket> packets = std::move(held_);
  held_.clear();
  for (auto it = packets.rbegin(); it != packets.rend(); ++it) deliver_locked(std::move(*it));
}

void FakeNetwork::release_held(const std::vector<size_t>& order) {
  std::lock_guard lock(mutex_);
  std::vector<bool> released(held_.size(), false);
  for (size_t index : order) {
    assert(index < held_.size() && !released[index] && "release each held packet once");
    released[index] = true;
    deliver_locked(held_[index]);
  }
  std::vector<FakePacket> still_held;
  for (size_t i = 0; i < held_.size(); ++i)
    if (!released[i]) still_held.push_back(std::move(held_[i]));
  held_ = std::move(still_held);
}

void FakeNetwork::drop_held() {
  std::lock_guard lock(mutex_);
  stats_.dropped += held_.size();
  held_.clear();
}

std::vector<FakePacket> FakeNetwork::take_sent() {
  std::lock_guard lock(mutex_);
  std::vector<FakePacket> log = std::move(sent_log_);
  sent_log_.clear();
  return log;
}

size_t FakeNetwork::sent_count() const {
  std::lock_guard lock(mutex_);
  return sent_log_.size();
}

void FakeNetwork::inject(const Gid& src, const Gid& dst, std::vector<uint8_t> bytes,
                         uint16_t src_port, bool congestion_experienced, int64_t arrival_ns) {
  assert(bytes.size() >= kMinRoceBytes);
  wire::write_icrc(fake_ip_udp(src, dst, src_port), bytes);
  std::lock_guard lock(mutex_);
  FakePacket packet{std::move(bytes), src, dst, src_port};
  packet.congestion_experienced = congestion_experienced;
  packet.arrival_ns = arrival_ns;
  send_locked(std::move(packet));
}

FakeNetwork::Stats FakeNetwork::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

Fate FakeNetwork::decide_locked(const FakePacket& packet) {
  for (Rule& rule : rules_) {
    if (rule.remaining == 0 || !rule.matcher(packet)) continue;
    if (rule.remaining != kEvery) --rule.remaining;
    return rule.fate;
  }
  return Fate::kDelivered;
}

void FakeNetwork::send_locked(FakePacket packet) {
  packet.sequence = next_sequence_++;
  ++stats_.sent;
  packet.fate = decide_locked(packet);
  if (packet.fate != Fate::kDropped && receivers_locked(packet).empty())
    packet.fate = Fate::kUndeliverable;
  sent_log_.push_back(packet);
  switch (packet.fate) {
    case Fate::kDelivered:
      deliver_locked(std::move(packet));
      break;
    case Fate::kDropped:
      ++stats_.dropped;
      break;
    case Fate::kHeld:
      ++stats_.held;
      held_.push_back(std::move(packet));
      break;
    case Fate::kDuplicated:
      ++stats_.duplicated;
      deliver_locked(packet);
      deliver_locked(std::move(packet));
      break;
    case Fate::kUndeliverable:
      ++stats_.undeliverable;
      break;
    case Fate::kMarked:
      ++stats_.marked;
      packet.congestion_experienced = true;
      deliver_locked(std::move(packet));
      break;
  }
}

std::vector<FakeTransport*> FakeNetwork::receivers_locked(const FakePacket& packet) const {
  const Gid& dst = packet.dst;
  if (wire::gid_is_multicast(dst)) {
    auto it = groups_.find(dst);
    if (it == groups_.end()) return {};
    return {it->second.begin(), it->second.end()};
  }
  auto it = endpoints_.find(dst);
  if (it == endpoints_.end()) return {};
  if (it->second.size() > 1 && packet.bytes.size() >= wire::kBthBytes) {
    const uint32_t block = wire::qpn_block(packet.dest_qp());
    for (const Endpoint& e : it->second)
      if (e.qpn_block == block) return {e.transport};
  }
  return {it->second.front().transport};
}

void FakeNetwork::deliver_locked(FakePacket packet) {
  const std::vector<FakeTransport*> receivers = receivers_locked(packet);
  if (receivers.empty()) {
    ++stats_.undeliverable;  // its receiver went away while it was held
    return;
  }
  ++stats_.delivered;
  for (size_t i = 0; i + 1 < receivers.size(); ++i) receivers[i]->enqueue_locked(packet);
  receivers.back()->enqueue_locked(std::move(packet));
}

// ---- FakeTransport ----

FakeTransport::FakeTransport(FakeNetwork& network, const Gid& gid)
    : network_(network), gid_(gid), event_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

FakeTransport::~FakeTransport() {
  network_.detach(this);
  close(event_fd_);
}

void FakeTransport::enqueue_locked(FakePacket packet) {
  queue_.push_back(std::move(packet));
  const uint64_t one = 1;
  // Level-triggered readiness: the counter stays nonzero until rx_burst empties
  // the queue and reads it back to zero.
  [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof one);
}

size_t FakeTransport::tx_burst(std::span<TxPacket> packets) {
  return tx_burst_with_errors(packets, {});
}

size_t FakeTransport::tx_burst_with_errors(std::span<TxPacket> packets,
                                           std::span<const BitError> errors) {
  std::lock_guard lock(network_.mutex_);
  for (size_t i = 0; i < packets.size(); ++i) {
    TxPacket& p = packets[i];
    if (p.bytes.size() < kMinRoceBytes) {
      ++counters_.tx_errors;
      continue;
    }
    p.src = gid_;
    wire::write_icrc(fake_ip_udp(gid_, p.dst, p.src_port), p.bytes);
    flip_bit_errors(packets, errors, i, i + 1);
    FakePacket packet{{p.bytes.begin(), p.bytes.end()}, gid_, p.dst, p.src_port};
    // The copy left with the bit errors; the caller's buffer does not keep them.
    flip_bit_errors(packets, errors, i, i + 1);
    ++counters_.tx_packets;
    counters_.tx_bytes += p.bytes.size();
    network_.send_locked(std::move(packet));
  }
  return packets.size();
}

size_t FakeTransport::rx_burst(std::span<RxPacket> packets) {
  std::lock_guard lock(network_.mutex_);
  last_burst_.clear();
  while (last_burst_.size() < packets.size() && !queue_.empty()) {
    FakePacket p = std::move(queue_.front());
    queue_.pop_front();
    if (!wire::check_icrc(fake_ip_udp(p.src, p.dst, p.src_port), p.bytes)) {
      ++counters_.rx_bad_icrc;
      continue;
    }
    last_burst_.push_back(std::move(p));
  }
  if (queue_.empty()) {
    uint64_t count;
    [[maybe_unused]] ssize_t n = read(event_fd_, &count, sizeof count);
  }
  for (size_t i = 0; i < last_burst_.size(); ++i) {
    FakePacket& p = last_burst_[i];
    packets[i] = RxPacket{.bytes = p.bytes, .src = p.src, .dst = p.dst, .src_port = p.src_port,
                          .congestion_experienced = p.congestion_experienced,
                          .arrival_ns = p.arrival_ns};
    ++counters_.rx_packets;
    counters_.rx_bytes += p.bytes.size();
  }
  return last_burst_.size();
}

TransportCounters FakeTransport::counters() const {
  std::lock_guard lock(network_.mutex_);
  return counters_;
}

std::string FakeTransport::describe() const {
  const Gid& g = gid_;
  char text[64];
  if (wire::gid_is_ipv4(g)) {
    std::snprintf(text, sizeof text, "fake %u.%u.%u.%u", g[12], g[13], g[14], g[15]);
  } else {
    std::snprintf(text, sizeof text, "fake gid ...%02x%02x", g[14], g[15]);
  }
  return text;
}

int FakeTransport::join_group(const Gid& group) {
  if (!wire::gid_is_multicast(group)) return EINVAL;
  std::lock_guard lock(network_.mutex_);
  network_.groups_[group].insert(this);
  return 0;
}

int FakeTransport::leave_group(const Gid& group) {
  std::lock_guard lock(network_.mutex_);
  auto it = network_.groups_.find(group);
  if (it == network_.groups_.end() || it->second.erase(this) == 0) return ENOENT;
  if (it->second.empty()) network_.groups_.erase(it);
  return 0;
}

size_t FakeTransport::queued() const {
  std::lock_guard lock(network_.mutex_);
  return queue_.size();
}

}  // namespace softrdma::transport::fake
