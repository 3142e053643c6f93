#include "runtime/status_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>

#include "runtime/status_file.h"
#include "runtime/status_registry.h"
#include "softrdma_version.h"

namespace softrdma::runtime {

namespace {

// Rows of a new segment's file: one page holds the header, the counters and these
// (a process with a few QPs uses 4 KiB of /dev/shm, not the whole table).
constexpr size_t kPageBytes = 4096;

size_t round_up_to_page(size_t bytes) { return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes; }

size_t reserved_bytes() {
  return round_up_to_page(status_file::fixed_bytes() + size_t(kStatusMaxQpRows) * sizeof(StatusQpRow));
}

uint32_t rows_held(size_t file_bytes) {
  return uint32_t((file_bytes - status_file::fixed_bytes()) / sizeof(StatusQpRow));
}

template <size_t N>
void copy_text(char (&out)[N], const std::string& text) {
  std::memset(out, 0, N);
  std::memcpy(out, text.data(), std::min(text.size(), N - 1));
}

// A new file, or -1: O_EXCL never opens what exists (a link, even a dangling one,
// or another user's file); O_NOFOLLOW says the same twice; 0600: the QPNs, peers
// and counters are the owner's business (status-segment-safety.md).
int create_exclusive(const std::string& path) {
  return open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

// What occupies `path`: a leftover segment of an earlier process that had this pid
// (killed, then the pid came round again) is removed; true then, to try again.
bool remove_own_leftover(const std::string& path) {
  if (status_registry::holds(path)) return false;  // ours, alive: another device
  struct stat st {};
  const int fd = status_file::open_for_reading(path, st);
  if (fd < 0) return false;
  StatusReport report;
  const bool genuine = status_file::parse(fd, st, report);
  close(fd);
  return genuine && st.st_uid == geteuid() && report.pid == getpid() &&
         status_file::remove_if_same(path, st.st_dev, st.st_ino);
}

// Says that a name was taken by a file this process did not make: once per device
// opened (the name is the pid's and the device's).
void warn_name_taken(const std::string& taken, const std::string& used) {
  struct stat st {};
  const bool link = lstat(taken.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
  std::fprintf(stderr,
               "softrdma: %s already exists and was not made by this process (%s, owner uid "
               "%u): left alone; this process's status is in %s "
               "(docs/decisions/status-segment-safety.md)\n",
               taken.c_str(), link ? "a symbolic link" : "a file", unsigned(st.st_uid),
               used.c_str());
}

// Creates the file: the usual name, or one beside it when that is taken.
int create_file(const std::string& directory, const std::string& device, std::string& path) {
  const std::string usual =
      directory + "/" + status_file::kPrefix + std::to_string(getpid()) + "-" + device;
  path = usual;
  int fd = create_exclusive(usual);
  if (fd >= 0 || errno != EEXIST) return fd;
  if (remove_own_leftover(usual) && (fd = create_exclusive(usual)) >= 0) return fd;
  const bool foreign = !status_registry::holds(usual);
  std::random_device random;
  for (int attempt = 0; attempt < 16; ++attempt) {
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, ".%08x", unsigned(random()));
    path = usual + suffix;
    fd = create_exclusive(path);
    if (fd >= 0) {
      if (foreign) warn_name_taken(usual, path);
      return fd;
    }
    if (errno != EEXIST) return -1;
  }
  return -1;
}

// Gives the file `bytes` of tmpfs now: a full /dev/shm fails here, with an error,
// not later with SIGBUS on a counter's first write.
bool size_file(int fd, size_t bytes) {
  return ftruncate(fd, off_t(bytes)) == 0 && posix_fallocate(fd, 0, off_t(bytes)) == 0;
}

}  // namespace

std::unique_ptr<StatusSegment> StatusSegment::create(const std::string& device,
                                                     const std::string& directory) {
  std::unique_ptr<StatusSegment> s(new StatusSegment);
  s->owner_pid_ = getpid();
  const int fd = create_file(directory, device, s->path_);
  if (fd < 0) return nullptr;
  s->fd_ = fd;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    unlink(s->path_.c_str());  // made just now, exclusively: ours
    return nullptr;
  }
  status_registry::add(s->path_, st.st_dev, st.st_ino);
  if (!s->map_initial(fd, device)) return nullptr;
  return s;
}

// Reserves address space for every row the table may grow to, so that the file
// grows in place: the engine's counters and every QP's counters stay where they
// are. Maps the first page of the file there and writes the header.
bool StatusSegment::map_initial(int fd, const std::string& device) {
  reserved_bytes_ = reserved_bytes();
  void* base = mmap(nullptr, reserved_bytes_, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return false;
  base_ = base;
  const size_t bytes = round_up_to_page(status_file::fixed_bytes() + sizeof(StatusQpRow));
  if (!size_file(fd, bytes) ||
      mmap(base, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
    return false;
  file_bytes_ = bytes;
  row_capacity_ = rows_held(bytes);
  header_ = static_cast<StatusHeader*>(base);
  std::memcpy(header_->magic, kStatusMagic, sizeof header_->magic);
  header_->header_bytes = sizeof(StatusHeader);
  header_->counter_count = sizeof(engine::EngineCounters) / sizeof(uint64_t);
  header_->transport_counter_count = sizeof(transport::UdpCounters) / sizeof(uint64_t);
  header_->row_bytes = sizeof(StatusQpRow);
  header_->pid = getpid();
  copy_text(header_->device, device);
  copy_text(header_->version, softrdma::kVersion);
  counters_ = new (header_ + 1) engine::EngineCounters();
  transport_counters_ = new (counters_ + 1) transport::UdpCounters();
  rows_ = reinterpret_cast<StatusQpRow*>(transport_counters_ + 1);
  return true;
}

StatusSegment::~StatusSegment() {
  if (base_ != nullptr) munmap(base_, reserved_bytes_);
  if (fd_ >= 0) close(fd_);
  if (getpid() != owner_pid_ || path_.empty()) return;
  dev_t dev{};
  ino_t ino{};
  if (status_registry::remove(path_, dev, ino)) status_file::remove_if_same(path_, dev, ino);
}

void StatusSegment::set_address(const std::string& address) { copy_text(header_->address, address); }

// Doubles the file (to the reserved size at most) and maps the new part behind
// the old: what is mapped stays mapped, so no pointer into the segment moves.
bool StatusSegment::grow_rows() {
  const size_t bytes = std::min(file_bytes_ * 2, reserved_bytes_);
  if (bytes == file_bytes_ || !size_file(fd_, bytes)) return false;
  void* tail = static_cast<char*>(base_) + file_bytes_;
  if (mmap(tail, bytes - file_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd_,
           off_t(file_bytes_)) == MAP_FAILED)
    return false;
  file_bytes_ = bytes;
  row_capacity_ = rows_held(bytes);
  return true;
}

// A free row: one freed before, else the next after the high-water mark (raised
// in the header once the file holds it, so a reader never reads past the file).
StatusQpRow* StatusSegment::new_row() {
  if (!free_rows_.empty()) {
    const uint32_t index = free_rows_.back();
    free_rows_.pop_back();
    return &rows_[index];
  }
  if (rows_in_use_ == row_capacity_ && !grow_rows()) return nullptr;
  StatusQpRow* row = &rows_[rows_in_use_++];
  std::atomic_ref<uint32_t>(header_->rows_in_use).store(rows_in_use_, std::memory_order_release);
  return row;
}

// One row per QP, found through the owner's index: the cost of a create or a
// state change does not depend on how many QPs there are (issue 14 defect 11).
// The QPN is written last and cleared first, so a reader skips a row being made
// or freed; a row being changed it may see half written, and shows it as it is.
engine::QpCounters* StatusSegment::update_qp(const StatusQpUpdate& qp, bool gone) {
  StatusQpRow* row = nullptr;
  const auto found = row_of_qpn_.find(qp.qpn);
  if (found != row_of_qpn_.end()) {
    row = &rows_[found->second];
  } else if (!gone && (row = new_row()) != nullptr) {
    row_of_qpn_.emplace(qp.qpn, uint32_t(row - rows_));
    new (&row->counters) engine::QpCounters();
  }
  if (row == nullptr) return nullptr;
  ++rows_examined_;
  std::atomic_ref<uint32_t> qpn(row->qpn);
  if (gone) {
    qpn.store(0, std::memory_order_release);
    free_rows_.push_back(found->second);
    row_of_qpn_.erase(found);
    return nullptr;
  }
  row->dest_qpn = qp.dest_qpn;
  row->type = qp.type;
  row->state = qp.state;
  row->path = qp.path;
  std::memcpy(row->peer, qp.peer, sizeof row->peer);
  qpn.store(qp.qpn, std::memory_order_release);
  return &row->counters;
}

}  // namespace softrdma::runtime
