#include "transport/fake/fault_injector.h"

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <limits>

#include "wire/icrc.h"

namespace softrdma::transport {

namespace {

constexpr int64_t kNsPerUs = 1000;
constexpr int64_t kBacklogRetryNs = 50 * kNsPerUs;
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
constexpr int64_t kReorderHoldNs = FaultInjector::kReorderHoldUs * kNsPerUs;

// BTH byte 4 (FECN, BECN, reserved) is the one byte of the UDP payload the ICRC
// does not cover (A17.3.3 counts it as ones: switches may mark congestion in
// flight). A flip there would go unnoticed by design, so corruption avoids it.
constexpr size_t kUncoveredByte = 4;

// The byte to corrupt: any but kUncoveredByte, picked by the low 32 bits.
size_t covered_byte(uint64_t bits, size_t size) {
  const size_t at = size_t(uint32_t(bits) % (size - 1));
  return at < kUncoveredByte ? at : at + 1;
}
uint8_t corrupt_mask(uint64_t bits) { return uint8_t(1u << ((bits >> 32) % 8)); }

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and the same numbers on every
// platform and standard library, unlike std::uniform_real_distribution.
class FaultInjector::Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  uint64_t state_;
};

FaultInjector::FaultInjector(std::unique_ptr<Transport> inner, FaultSettings settings,
                             std::function<int64_t()> now_ns)
    : inner_(std::move(inner)), settings_(settings),
      now_ns_(now_ns ? std::move(now_ns) : std::function<int64_t()>(monotonic_ns)),
      tx_random_(std::make_unique<Random>(settings.seed)),
      // A different stream for rx: tx and rx decisions do not depend on each other.
      rx_random_(std::make_unique<Random>(settings.seed ^ 0x5851f42d4c957f2dull)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  epoll_event event{};
  event.events = EPOLLIN;
  if (inner_->rx_fd() >= 0) {
    event.data.fd = inner_->rx_fd();
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, inner_->rx_fd(), &event);
  }
  event.data.fd = timer_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, timer_fd_, &event);
}

FaultInjector::~FaultInjector() {
  close(timer_fd_);
  close(epoll_fd_);
}

void FaultInjector::add_rule(FaultRule rule) {
  std::lock_guard lock(mutex_);
  rules_.push_back(std::move(rule));
}

FaultCounters FaultInjector::fault_counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

size_t FaultInjector::pending() const {
  std::lock_guard lock(mutex_);
  return tx_held_.size() + rx_held_.size() + tx_reordered_.size() + rx_reordered_.size() +
         tx_backlog_.size();
}

TransportCounters FaultInjector::counters() const {
  TransportCounters c = inner_->counters();
  std::lock_guard lock(mutex_);
  c.rx_bad_icrc += rx_bad_icrc_;
  return c;
}

std::string FaultInjector::describe() const {
  return inner_->describe() + " with faults " + settings_.to_string();
}

// ---- decisions ----

FaultInjector::Decision FaultInjector::decide_at_random(Random& random) {
  // Always the same draws, in the same order (see the header).
  const double u_loss = random.uniform(), u_corrupt = random.uniform(), u_dup = random.uniform(),
               u_reorder = random.uniform(), u_jitter = random.uniform();
  Decision d;
  d.corrupt_bits = random.next();
  d.drop = u_loss < settings_.loss;
  d.corrupt = u_corrupt < settings_.corrupt;
  d.duplicate = u_dup < settings_.dup;
  d.reorder = u_reorder < settings_.reorder;
  d.delay_ns = int64_t(settings_.delay_us) * kNsPerUs +
               int64_t(u_jitter * double(settings_.jitter_us) * double(kNsPerUs));
  return d;
}

FaultInjector::Decision FaultInjector::decide_by_rule(FaultRule& rule) {
  --rule.count;
  Decision d;
  switch (rule.action) {
    case FaultAction::kDrop: d.drop = true; break;
    case FaultAction::kDuplicate: d.duplicate = true; break;
    case FaultAction::kReorder: d.reorder = true; break;
    case FaultAction::kDelay: d.delay_ns = int64_t(rule.delay_us) * kNsPerUs; break;
    case FaultAction::kCorrupt: d.corrupt = true; break;
  }
  return d;
}

FaultInjector::Decision FaultInjector::decide(FaultDirection side, std::span<const uint8_t> bytes) {
  Decision random_decision;
  if (covers(settings_.direction, side))
    random_decision = decide_at_random(side == FaultDirection::kTx ? *tx_random_ : *rx_random_);
  for (FaultRule& rule : rules_) {
    if (rule.count == 0 || !covers(rule.direction, side) || !rule.matches || !rule.matches(bytes))
      continue;
    Decision d = decide_by_rule(rule);
    d.corrupt_bits = random_decision.corrupt_bits;
    return d;
  }
  return random_decision;
}

// ---- tx ----

size_t FaultInjector::tx_burst(std::span<TxPacket> packets) {
  std::lock_guard lock(mutex_);
  const int64_t now = now_ns_();
  release_due_tx(now);
  for (TxPacket& p : packets) stage_tx(p, decide(FaultDirection::kTx, p.bytes), now);
  send_staged_tx();
  arm_timer();
  return packets.size();  // never pushes back (see the header)
}

void FaultInjector::stage_tx(TxPacket& packet, const Decision& d, int64_t now) {
  FaultCounters::Side& c = counters_.tx;
  ++c.packets;
  if (d.drop) {
    ++c.dropped;
    return;
  }
  BitError error{};  // kept beside the packet: the packet carries no fault
  if (d.corrupt && packet.bytes.size() > kUncoveredByte) {
    ++c.corrupted;
    error.at = uint16_t(covered_byte(d.corrupt_bits, packet.bytes.size()));
    error.mask = corrupt_mask(d.corrupt_bits);
  }
  const int copies = d.duplicate ? 2 : 1;
  c.duplicated += d.duplicate;
  if (d.reorder || d.delay_ns > 0) {
    c.reordered += d.reorder;
    c.delayed += d.delay_ns > 0;
    for (int i = 0; i < copies; ++i) {
      Held held{{packet.bytes.begin(), packet.bytes.end()}, packet, {}, error};
      if (d.delay_ns > 0) {
        tx_held_.emplace(now + d.delay_ns + (d.reorder ? kReorderHoldNs : 0), std::move(held));
      } else {
        tx_reordered_.emplace_back(now + kReorderHoldNs, std::move(held));
      }
    }
    return;
  }
  stage(packet, error);
  // The copy gets a buffer of its own (transport.h: the transport writes each
  // packet's ICRC, and two packets of one GSO send carry different IPv4 IDs).
  if (d.duplicate)
    stage_held_tx(Held{{packet.bytes.begin(), packet.bytes.end()}, packet, {}, error});
  // A packet held back for reordering leaves right after the next one that passes.
  for (; !tx_reordered_.empty(); tx_reordered_.pop_front())
    stage_held_tx(std::move(tx_reordered_.front().second));
}

void FaultInjector::stage_held_tx(Held&& moved) {
  // staged_ points into the bytes, which keep their address when `staged_held_` grows.
  Held& held = staged_held_.emplace_back(std::move(moved));
  held.tx.bytes = held.bytes;
  stage(held.tx, held.error);
}

void FaultInjector::stage(const TxPacket& packet, const BitError& error) {
  staged_.push_back(packet);
  if (error.mask != 0)
    staged_errors_.push_back(BitError{staged_.size() - 1, error.at, error.mask});
}

BitError FaultInjector::staged_error(size_t index) const {
  for (const BitError& e : staged_errors_)
    if (e.packet == index) return e;
  return BitError{};
}

// Hands the inner transport what is staged, with its bit errors; how many it took.
size_t FaultInjector::send_staged() {
  return inner_->tx_burst_with_errors(staged_, staged_errors_);
}

void FaultInjector::release_due_tx(int64_t now) {
  if (!tx_backlog_.empty()) {  // older than anything else: first
    for (Held& held : tx_backlog_) {
      held.tx.bytes = held.bytes;
      stage(held.tx, held.error);
    }
    const size_t taken = send_staged();
    tx_backlog_.erase(tx_backlog_.begin(), tx_backlog_.begin() + ptrdiff_t(taken));
    staged_.clear();
    staged_errors_.clear();
  }
  for (; !tx_held_.empty() && tx_held_.begin()->first <= now; tx_held_.erase(tx_held_.begin()))
    stage_held_tx(std::move(tx_held_.begin()->second));
  for (; !tx_reordered_.empty() && tx_reordered_.front().first <= now; tx_reordered_.pop_front())
    stage_held_tx(std::move(tx_reordered_.front().second));
}

void FaultInjector::send_staged_tx() {
  size_t taken = 0;
  if (!staged_.empty() && tx_backlog_.empty()) taken = send_staged();
  // What the inner transport refused waits, in order, behind the earlier refusals.
  for (size_t i = taken; i < staged_.size(); ++i) {
    if (tx_backlog_.size() >= kBacklogLimit) {
      ++counters_.tx.backlog_dropped;
      continue;
    }
    const TxPacket& p = staged_[i];
    tx_backlog_.push_back(Held{{p.bytes.begin(), p.bytes.end()}, p, {}, staged_error(i)});
  }
  staged_.clear();
  staged_errors_.clear();
  staged_held_.clear();
}

// ---- rx ----

size_t FaultInjector::rx_burst(std::span<RxPacket> packets) {
  std::lock_guard lock(mutex_);
  if (armed_due_ > 0 && armed_due_ <= monotonic_ns()) {  // the expiry that made rx_fd readable
    uint64_t expirations;
    [[maybe_unused]] ssize_t r = read(timer_fd_, &expirations, sizeof expirations);
    armed_due_ = -1;  // re-armed below
  }
  const int64_t now = now_ns_();
  release_due_tx(now);  // delayed tx packets are released from here too (timer wake-up)
  send_staged_tx();
  rx_delivered_.clear();
  rx_ready_.clear();
  release_due_rx(now);
  if (rx_ready_.size() < packets.size()) {
    inner_rx_.resize(packets.size() - rx_ready_.size());
    const size_t n = inner_->rx_burst(inner_rx_);
    for (size_t i = 0; i < n; ++i)
      take_rx(inner_rx_[i], decide(FaultDirection::kRx, inner_rx_[i].bytes), now);
  }
  // Duplicates may make more than fits: the rest are due at once.
  for (size_t i = packets.size(); i < rx_ready_.size(); ++i) {
    const RxPacket& p = rx_ready_[i];
    rx_held_.emplace(now, Held{{p.bytes.begin(), p.bytes.end()}, {}, p});
  }
  const size_t count = std::min(packets.size(), rx_ready_.size());
  std::copy_n(rx_ready_.begin(), count, packets.begin());
  arm_timer();
  return count;
}

// Flips one bit, then checks the ICRC as a receiving socket can (IPv4: solving for
// the ID, which lets 1 in 2^15 corruptions through, as on a real receiver).
// Returns whether the packet still passes.
bool FaultInjector::corrupt_rx(RxPacket& packet, uint64_t bits) {
  packet.bytes[covered_byte(bits, packet.bytes.size())] ^= corrupt_mask(bits);
  const wire::IpUdpInfo info{.src = packet.src, .dst = packet.dst, .src_port = packet.src_port,
                             .dst_port = inner_->udp_port()};
  if (!wire::gid_is_ipv4(packet.src)) return wire::check_icrc(info, packet.bytes);
  const auto solved = wire::solve_icrc_ipv4(info, packet.bytes);
  if (!solved) return false;
  packet.ipv4_id = solved->id;
  packet.ipv4_df = solved->df;
  return true;
}

void FaultInjector::take_rx(RxPacket& packet, const Decision& d, int64_t now) {
  FaultCounters::Side& c = counters_.rx;
  ++c.packets;
  if (d.drop) {
    ++c.dropped;
    return;
  }
  if (d.corrupt && packet.bytes.size() > kUncoveredByte) {
    ++c.corrupted;
    if (!corrupt_rx(packet, d.corrupt_bits)) {
      ++rx_bad_icrc_;
      return;
    }
  }
  const int copies = d.duplicate ? 2 : 1;
  c.duplicated += d.duplicate;
  if (d.reorder || d.delay_ns > 0) {
    c.reordered += d.reorder;
    c.delayed += d.delay_ns > 0;
    for (int i = 0; i < copies; ++i) {
      Held held{{packet.bytes.begin(), packet.bytes.end()}, {}, packet};
      if (d.delay_ns > 0) {
        rx_held_.emplace(now + d.delay_ns + (d.reorder ? kReorderHoldNs : 0), std::move(held));
      } else {
        rx_reordered_.emplace_back(now + kReorderHoldNs, std::move(held));
      }
    }
    return;
  }
  rx_ready_.push_back(packet);
  if (d.duplicate)  // its own copy: the receiver may write into what it is given
    deliver_held_rx(Held{{packet.bytes.begin(), packet.bytes.end()}, {}, packet});
  // A packet held back for reordering arrives right after the next one.
  for (; !rx_reordered_.empty(); rx_reordered_.pop_front())
    deliver_held_rx(std::move(rx_reordered_.front().second));
}

// The bytes live in rx_delivered_ until the next rx_burst.
void FaultInjector::deliver_held_rx(Held&& moved) {
  Held& held = rx_delivered_.emplace_back(std::move(moved));
  held.rx.bytes = held.bytes;
  rx_ready_.push_back(held.rx);
}

void FaultInjector::release_due_rx(int64_t now) {
  for (; !rx_held_.empty() && rx_held_.begin()->first <= now; rx_held_.erase(rx_held_.begin()))
    deliver_held_rx(std::move(rx_held_.begin()->second));
  for (; !rx_reordered_.empty() && rx_reordered_.front().first <= now; rx_reordered_.pop_front())
    deliver_held_rx(std::move(rx_reordered_.front().second));
}

// Sets the timerfd in rx_fd()'s epoll set to the next due time, so that a progress
// loop blocked on rx_fd() calls rx_burst, which releases what is due.
void FaultInjector::arm_timer() {
  int64_t due = kNever;
  if (!tx_held_.empty()) due = std::min(due, tx_held_.begin()->first);
  if (!rx_held_.empty()) due = std::min(due, rx_held_.begin()->first);
  if (!tx_reordered_.empty()) due = std::min(due, tx_reordered_.front().first);
  if (!rx_reordered_.empty()) due = std::min(due, rx_reordered_.front().first);
  if (!tx_backlog_.empty()) due = std::min(due, now_ns_() + kBacklogRetryNs);
  due = due == kNever ? 0 : std::max<int64_t>(due, 1);
  if (due == armed_due_) return;
  armed_due_ = due;
  itimerspec spec{};  // all zero: disarmed
  spec.it_value.tv_sec = due / 1'000'000'000;
  spec.it_value.tv_nsec = due % 1'000'000'000;
  timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
}

std::unique_ptr<Transport> wrap_with_faults(std::unique_ptr<Transport>&& inner,
                                            std::string_view settings_text, std::string& error) {
  const std::optional<FaultSettings> settings = FaultSettings::parse(settings_text, error);
  if (!settings) return nullptr;
  if (!settings->any()) return std::move(inner);
  return std::make_unique<FaultInjector>(std::move(inner), *settings);
}

}  // namespace softrdma::transport
