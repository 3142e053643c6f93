#include "runtime/status_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace softrdma::runtime {

namespace {

constexpr char kDirectory[] = "/dev/shm";
constexpr char kPrefix[] = "softrdma-";
constexpr uint32_t kTombstone = 0xffffffff;  // a freed row (no QPN is this large)

// Counters, in the order EngineCounters declares them.
constexpr size_t kCounters = sizeof(engine::EngineCounters) / sizeof(uint64_t);
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));

size_t segment_bytes() {
  return sizeof(StatusHeader) + sizeof(engine::EngineCounters) +
         size_t(kStatusQpRows) * sizeof(StatusQpRow);
}

void copy_text(char (&out)[64], const std::string& text) {
  std::memset(out, 0, sizeof out);
  std::memcpy(out, text.data(), std::min(text.size(), sizeof out - 1));
}

std::vector<std::string> counter_names() {
  std::vector<std::string> names;
  engine::EngineCounters probe;
  probe.for_each([&](const char* name, uint64_t) { names.emplace_back(name); });
  return names;
}

bool process_alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

// Maps `path` read-only and turns it into a report; false for a file that is not a
// segment of this build (or is torn, or truncated).
bool read_one(const std::string& path, StatusReport& out, bool& stale) {
  stale = false;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st{};
  if (fstat(fd, &st) != 0 || size_t(st.st_size) != segment_bytes()) {
    close(fd);
    return false;
  }
  void* base = mmap(nullptr, segment_bytes(), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return false;
  const auto* h = static_cast<const StatusHeader*>(base);
  const bool ours = std::memcmp(h->magic, kStatusMagic, sizeof h->magic) == 0 &&
                    h->header_bytes == sizeof(StatusHeader) && h->counter_count == kCounters &&
                    h->qp_rows == kStatusQpRows;
  if (ours) {
    out.pid = h->pid;
    out.device.assign(h->device, strnlen(h->device, sizeof h->device));
    out.address.assign(h->address, strnlen(h->address, sizeof h->address));
    out.path = path;
    stale = !process_alive(h->pid);
    const auto* values = reinterpret_cast<const uint64_t*>(h + 1);
    const auto names = counter_names();
    for (size_t i = 0; i < kCounters; ++i) out.counters.emplace_back(names[i], values[i]);
    const auto* rows = reinterpret_cast<const StatusQpRow*>(values + kCounters);
    for (uint32_t i = 0; i < kStatusQpRows; ++i) {
      const StatusQpRow& r = rows[i];
      if (r.qpn == 0 || r.qpn == kTombstone) continue;
      StatusReport::Qp q{r.qpn, r.dest_qpn, r.type, r.state, {},
                         r.counters.tx_packets.load(std::memory_order_relaxed),
                         r.counters.rx_packets.load(std::memory_order_relaxed),
                         r.counters.retransmitted_packets.load(std::memory_order_relaxed)};
      std::memcpy(q.peer, r.peer, sizeof q.peer);
      out.qps.push_back(q);
    }
  }
  munmap(base, segment_bytes());
  return ours;
}

}  // namespace

std::unique_ptr<StatusSegment> StatusSegment::create(const std::string& device,
                                                     const std::string& address) {
  std::unique_ptr<StatusSegment> s(new StatusSegment);
  s->owner_pid_ = getpid();
  s->path_ = std::string(kDirectory) + "/" + kPrefix + std::to_string(getpid()) + "-" + device;
  const int fd = open(s->path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  s->bytes_ = segment_bytes();
  if (ftruncate(fd, off_t(s->bytes_)) != 0) {
    close(fd);
    unlink(s->path_.c_str());
    return nullptr;
  }
  void* base = mmap(nullptr, s->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    unlink(s->path_.c_str());
    return nullptr;
  }
  s->base_ = base;
  auto* h = static_cast<StatusHeader*>(base);
  std::memcpy(h->magic, kStatusMagic, sizeof h->magic);
  h->header_bytes = sizeof(StatusHeader);
  h->counter_count = kCounters;
  h->qp_rows = kStatusQpRows;
  h->pid = getpid();
  copy_text(h->device, device);
  copy_text(h->address, address);
  s->counters_ = new (h + 1) engine::EngineCounters();
  s->rows_ = reinterpret_cast<StatusQpRow*>(reinterpret_cast<uint64_t*>(h + 1) + kCounters);
  return s;
}

StatusSegment::~StatusSegment() {
  if (base_ != nullptr) munmap(base_, bytes_);
  if (getpid() == owner_pid_) unlink(path_.c_str());
}

// Open addressing by QPN. A freed row becomes a tombstone, so that a row further
// along its chain is still found; QPNs are consecutive, so chains stay short. A
// reader may see a row half written; it shows it as it is.
engine::QpCounters* StatusSegment::update_qp(uint32_t qpn, uint32_t dest_qpn, uint8_t type,
                                             uint8_t state, const uint8_t (&peer)[16],
                                             bool gone) {
  StatusQpRow* reuse = nullptr;
  auto fill = [&](StatusQpRow& row, bool fresh) {
    if (fresh) new (&row.counters) engine::QpCounters();
    row.dest_qpn = dest_qpn;
    row.type = type;
    row.state = state;
    std::memcpy(row.peer, peer, sizeof row.peer);
    row.qpn = qpn;
    return &row.counters;
  };
  for (uint32_t probe = 0; probe < kStatusQpRows; ++probe) {
    StatusQpRow& row = rows_[(qpn + probe) % kStatusQpRows];
    if (row.qpn == qpn) {
      if (!gone) return fill(row, false);
      row.qpn = kTombstone;
      return nullptr;
    }
    if (row.qpn == kTombstone) {
      if (reuse == nullptr) reuse = &row;
    } else if (row.qpn == 0) {
      return gone ? nullptr : fill(reuse != nullptr ? *reuse : row, true);
    }
  }
  return !gone && reuse != nullptr ? fill(*reuse, true) : nullptr;
}

std::vector<StatusReport> read_status_segments(int& stale_removed) {
  stale_removed = 0;
  std::vector<StatusReport> reports;
  DIR* dir = opendir(kDirectory);
  if (dir == nullptr) return reports;
  while (dirent* entry = readdir(dir)) {
    if (std::strncmp(entry->d_name, kPrefix, sizeof kPrefix - 1) != 0) continue;
    const std::string path = std::string(kDirectory) + "/" + entry->d_name;
    StatusReport report;
    bool stale = false;
    if (!read_one(path, report, stale)) continue;
    if (stale) {
      unlink(path.c_str());
      ++stale_removed;
      continue;
    }
    reports.push_back(std::move(report));
  }
  closedir(dir);
  return reports;
}

}  // namespace softrdma::runtime
