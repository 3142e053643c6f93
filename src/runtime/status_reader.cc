// Reading status segments (`softrdma status`): every file is untrusted input. It
// is opened without following links, read with pread (bounded by its size, no
// mapping a writer could shrink into SIGBUS), believed only when its owner is the
// reader (or, for root, the user running the process it describes), and removed
// only when it is the reader's own, its process is gone, and it is still the file
// that was read. docs/decisions/status-segment-safety.md.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/status_file.h"
#include "runtime/status_segment.h"

namespace softrdma::runtime {

namespace status_file {

namespace {

constexpr size_t kEngineCounters = sizeof(engine::EngineCounters) / sizeof(uint64_t);
constexpr size_t kUdpCounters = sizeof(transport::UdpCounters) / sizeof(uint64_t);

// A row as plain bytes: the reader copies rows, it never uses the writer's atomics.
struct RawRow {
  uint32_t qpn, dest_qpn;
  uint8_t type, state, path, reserved[5], peer[16];
  uint64_t tx_packets, rx_packets, retransmitted_packets, host_operations;
  uint64_t cnps_received, rate_mbps, window_hundredths;
  uint64_t base_rtt_us, rtt_us, target_us;
};
static_assert(sizeof(RawRow) == sizeof(StatusQpRow));
static_assert(offsetof(RawRow, tx_packets) == offsetof(StatusQpRow, counters));

template <typename Counters>
std::vector<std::pair<std::string, uint64_t>> named(const uint64_t* values) {
  std::vector<std::pair<std::string, uint64_t>> out;
  Counters probe;
  size_t i = 0;
  probe.for_each([&](const char* name, uint64_t) { out.emplace_back(name, values[i++]); });
  return out;
}

bool read_exactly(int fd, void* out, size_t bytes, off_t offset) {
  return pread(fd, out, bytes, offset) == ssize_t(bytes);
}

bool header_of_this_layout(const StatusHeader& h) {
  return std::memcmp(h.magic, kStatusMagic, sizeof h.magic) == 0 &&
         h.header_bytes == sizeof(StatusHeader) && h.counter_count == kEngineCounters &&
         h.transport_counter_count == kUdpCounters && h.row_bytes == sizeof(StatusQpRow);
}

// Rows in use, as many as the file holds: a torn or lying header reads no further.
void read_rows(int fd, const struct stat& st, uint32_t rows_in_use, StatusReport& out) {
  const size_t held = (size_t(st.st_size) - fixed_bytes()) / sizeof(RawRow);
  const size_t rows = std::min<size_t>(rows_in_use, held);
  std::vector<RawRow> chunk(4096);
  for (size_t first = 0; first < rows; first += chunk.size()) {
    const size_t n = std::min(chunk.size(), rows - first);
    const off_t at = off_t(fixed_bytes() + first * sizeof(RawRow));
    if (!read_exactly(fd, chunk.data(), n * sizeof(RawRow), at)) return;
    for (size_t i = 0; i < n; ++i) {
      const RawRow& r = chunk[i];
      if (r.qpn == 0) continue;
      StatusReport::Qp q{r.qpn, r.dest_qpn, r.type, r.state, {},
                         r.tx_packets, r.rx_packets, r.retransmitted_packets, r.path,
                         r.host_operations, r.cnps_received, r.rate_mbps,
                         r.window_hundredths, r.base_rtt_us, r.rtt_us, r.target_us};
      std::memcpy(q.peer, r.peer, sizeof q.peer);
      out.qps.push_back(q);
    }
  }
}

}  // namespace

size_t fixed_bytes() {
  return sizeof(StatusHeader) + sizeof(engine::EngineCounters) + sizeof(transport::UdpCounters);
}

int open_for_reading(const std::string& path, struct stat& st) {
  // O_NONBLOCK: a FIFO planted under the name must not block the reader.
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return -1;
  }
  return fd;
}

bool parse(int fd, const struct stat& st, StatusReport& out) {
  if (size_t(st.st_size) < fixed_bytes()) return false;
  StatusHeader h{};
  if (!read_exactly(fd, &h, sizeof h, 0) || !header_of_this_layout(h)) return false;
  std::vector<uint64_t> values(kEngineCounters + kUdpCounters);
  if (!read_exactly(fd, values.data(), values.size() * sizeof(uint64_t), sizeof h)) return false;
  out.pid = h.pid;
  out.device.assign(h.device, strnlen(h.device, sizeof h.device));
  out.address.assign(h.address, strnlen(h.address, sizeof h.address));
  out.version.assign(h.version, strnlen(h.version, sizeof h.version));
  out.counters = named<engine::EngineCounters>(values.data());
  out.transport_counters = named<transport::UdpCounters>(values.data() + kEngineCounters);
  read_rows(fd, st, h.rows_in_use, out);
  return true;
}

bool remove_if_same(const char* path, dev_t dev, ino_t ino) {
  struct stat now {};
  if (lstat(path, &now) != 0 || now.st_dev != dev || now.st_ino != ino) return false;
  return unlink(path) == 0;
}

bool remove_if_same(const std::string& path, dev_t dev, ino_t ino) {
  return remove_if_same(path.c_str(), dev, ino);
}

bool process_exists(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

}  // namespace status_file

namespace {

// The user running `pid`: the owner of /proc/<pid>. -1 when it cannot be told.
uid_t user_running(int pid) {
  struct stat st {};
  const std::string proc = "/proc/" + std::to_string(pid);
  return stat(proc.c_str(), &st) == 0 ? st.st_uid : uid_t(-1);
}

// Whose segments a reader believes: its own; root also those of a user about the
// process that user runs (a file of user A naming B's process is a forgery).
bool trusted(const struct stat& st, int pid) {
  if (st.st_uid == geteuid()) return true;
  return geteuid() == 0 && user_running(pid) == st.st_uid;
}

}  // namespace

// The pid a segment names: its header's, for this layout. A segment of another
// layout (left by a killed process of an older or newer softrdma: the header
// changes whenever a counter is added) still starts with the magic's stem; its
// pid is then the one in its name, softrdma-<pid>-<device>, which every layout
// has used. 0 when the file is neither.
static int segment_pid(const std::string& path, int fd, const struct stat& st) {
  using namespace status_file;
  StatusHeader h{};
  if (size_t(st.st_size) >= fixed_bytes() && read_exactly(fd, &h, sizeof h, 0) &&
      header_of_this_layout(h))
    return int(h.pid);
  constexpr size_t kStem = sizeof kStatusMagic - 1;  // "srdmast", without the layout
  char magic[kStem];
  if (!read_exactly(fd, magic, kStem, 0) || std::memcmp(magic, kStatusMagic, kStem) != 0) return 0;
  const std::string name = path.substr(path.rfind('/') + 1);
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + sizeof kPrefix - 1, &end, 10);
  return pid > 0 && pid <= INT32_MAX && *end == '-' ? int(pid) : 0;
}

// Calls visit(path, fd, st) for every regular file of `directory` named like a
// status segment, opened for reading (closed after the call).
template <typename Visit>
static void for_each_segment(const std::string& directory, Visit visit) {
  using namespace status_file;
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) return;
  while (dirent* entry = readdir(dir)) {
    if (std::strncmp(entry->d_name, kPrefix, sizeof kPrefix - 1) != 0) continue;
    const std::string path = directory + "/" + entry->d_name;
    struct stat st {};
    const int fd = open_for_reading(path, st);
    if (fd < 0) continue;
    visit(path, fd, st);
    close(fd);
  }
  closedir(dir);
}

int remove_stale_status_segments(const std::string& directory) {
  using namespace status_file;
  int removed = 0;
  for_each_segment(directory, [&](const std::string& path, int fd, const struct stat& st) {
    const int pid = segment_pid(path, fd, st);
    if (pid == 0 || process_exists(pid) || st.st_uid != geteuid()) return;
    if (remove_if_same(path, st.st_dev, st.st_ino)) ++removed;
  });
  return removed;
}

std::vector<StatusReport> read_status_segments(int& stale_removed, const std::string& directory) {
  using namespace status_file;
  stale_removed = 0;
  std::vector<StatusReport> reports;
  for_each_segment(directory, [&](const std::string& path, int fd, const struct stat& st) {
    StatusReport report;
    if (!parse(fd, st, report)) return;
    report.path = path;
    if (!process_exists(report.pid)) {
      // Only the reader's own leftovers, and only if still the file read.
      if (st.st_uid == geteuid() && remove_if_same(path, st.st_dev, st.st_ino)) ++stale_removed;
      return;
    }
    if (trusted(st, report.pid)) reports.push_back(std::move(report));
  });
  return reports;
}

}  // namespace softrdma::runtime
