#include "samehost/shared_pages.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>

namespace softrdma::samehost {

namespace {

uint64_t page_size() { return uint64_t(sysconf(_SC_PAGESIZE)); }

// One line of /proc/self/maps (proc(5)).
struct Mapped {
  uint64_t begin = 0, end = 0, inode = 0;
  char perms[5] = {};
  std::string path;
};

// Whether [begin, end) is mapped without a gap and `accept` takes every mapping
// that overlaps it.
bool every_mapping(uint64_t begin, uint64_t end, const std::function<bool(const Mapped&)>& accept) {
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return false;
  char line[4096];
  uint64_t covered = begin;
  bool ok = true;
  while (ok && covered < end && std::fgets(line, sizeof line, maps) != nullptr) {
    Mapped m;
    int path_at = 0;
    if (std::sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %*s %*s %" SCNu64 " %n", &m.begin, &m.end,
                    m.perms, &m.inode, &path_at) < 4)
      continue;
    if (m.end <= covered) continue;
    if (m.begin > covered) break;  // a gap: not mapped
    m.path = line + path_at;
    if (!m.path.empty() && m.path.back() == '\n') m.path.pop_back();
    ok = accept(m);
    covered = m.end;
  }
  std::fclose(maps);
  return ok && covered >= end;
}

bool all_zero(const uint8_t* p, size_t n) { return p[0] == 0 && std::memcmp(p, p + 1, n - 1) == 0; }

// Page by page, leaving the destination's pages that would be all zeros untouched
// (they are zeros already, and stay unallocated: a large region registered
// before it was written costs no memory).
void copy_pages(uint8_t* to, const uint8_t* from, uint64_t n) {
  const uint64_t page = page_size();
  for (uint64_t at = 0; at < n; at += page)
    if (!all_zero(from + at, page)) std::memcpy(to + at, from + at, page);
}

// The file's first `n` bytes into `to`, extent by extent (SEEK_DATA/SEEK_HOLE:
// what was never written stays unallocated there). From the file, not from its
// mapping: the application may have freed its buffer before deregistering it
// (UCX's registration cache does at cleanup), and the pages are still ours to
// move, but reading them through its addresses reads freed memory (ASan says so).
bool read_back(int fd, uint8_t* to, uint64_t n) {
  off_t at = 0;
  while (uint64_t(at) < n) {
    const off_t data = lseek(fd, at, SEEK_DATA);
    if (data < 0) return errno == ENXIO;  // nothing written past `at`
    if (uint64_t(data) >= n) return true;
    off_t hole = lseek(fd, data, SEEK_HOLE);
    if (hole < 0) return false;
    hole = off_t(std::min<uint64_t>(uint64_t(hole), n));
    for (off_t p = data; p < hole;) {
      const ssize_t got = pread(fd, to + p, size_t(hole - p), p);
      if (got <= 0) return false;
      p += got;
    }
    at = hole;
  }
  return true;
}

// Maps `staging` over [begin, begin + n) in one step (mremap(2) replaces what
// was there), so the range is never unmapped in between. By the system call
// itself, not libc's mremap: the range keeps its contents, and a library that
// watches the application's mappings must not take this for an unmap. UCX's ucm
// hooks mremap: its registration cache dropped the region it had just
// registered, registered it again, which moved it again, without end
// (ucx_perftest ucp_put_lat over rc_verbs spun at 100 % on both sides).
bool move_over(void* staging, uint64_t begin, uint64_t n) {
  const long moved = syscall(SYS_mremap, staging, n, n, MREMAP_MAYMOVE | MREMAP_FIXED,
                             reinterpret_cast<void*>(begin));
  return moved != -1;
}

}  // namespace

std::unique_ptr<SharedPages> SharedPages::share(void* addr, uint64_t length, std::string& why) {
  const uint64_t page = page_size();
  const uint64_t at = reinterpret_cast<uintptr_t>(addr);
  if (length > UINT64_MAX - at - page) {
    why = "the range wraps";
    return nullptr;
  }
  const uint64_t begin = (at + page - 1) / page * page;
  const uint64_t end = (at + length) / page * page;
  if (end <= begin) {
    why = "no whole page";
    return nullptr;
  }
  // Private anonymous read-write memory only: a file's pages are the file's, the
  // stack grows, huge pages and shared mappings are somebody's choice.
  if (!every_mapping(begin, end, [](const Mapped& m) {
        return std::strcmp(m.perms, "rw-p") == 0 && m.inode == 0 &&
               (m.path.empty() || m.path == "[heap]");
      })) {
    why = "not private anonymous read-write memory";
    return nullptr;
  }
  const uint64_t n = end - begin;
  const int fd = memfd_create("softrdma-mr", MFD_CLOEXEC);
  struct stat st{};
  if (fd < 0 || ftruncate(fd, off_t(n)) != 0 || fstat(fd, &st) != 0) {
    why = std::string("memfd: ") + std::strerror(errno);
    if (fd >= 0) close(fd);
    return nullptr;
  }
  void* staging = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (staging == MAP_FAILED) {
    why = std::string("mmap: ") + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  copy_pages(static_cast<uint8_t*>(staging), reinterpret_cast<const uint8_t*>(begin), n);
  if (!move_over(staging, begin, n)) {
    why = std::string("mremap: ") + std::strerror(errno);
    munmap(staging, n);
    close(fd);
    return nullptr;
  }
  return std::unique_ptr<SharedPages>(
      new SharedPages(SharedSpan{begin, n, uint64_t(st.st_ino), uint32_t(fd)}, fd));
}

// The range is still this file's, mapped as it was shared: the application did
// not unmap or replace it (freeing a buffer before deregistering it).
bool SharedPages::still_ours() const {
  return every_mapping(span_.begin, span_.begin + span_.length, [&](const Mapped& m) {
    return std::strcmp(m.perms, "rw-s") == 0 && m.inode == span_.inode;
  });
}

SharedPages::~SharedPages() {
  const uint64_t n = span_.length;
  if (still_ours()) {
    void* staging = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (staging != MAP_FAILED) {
      if (!read_back(fd_, static_cast<uint8_t*>(staging), n) ||
          !move_over(staging, span_.begin, n))
        munmap(staging, n);
    }
  }
  close(fd_);
}

PeerPages::Mapping::~Mapping() {
  if (base != nullptr) munmap(base, span.length);
}

std::shared_ptr<const PeerPages::Mapping> PeerPages::map(const SharedSpan& span) {
  std::lock_guard lock(mutex_);
  // The owner gave some pages back: the files it used may be gone from it; a
  // mapping held here would only keep their memory alive.
  const uint64_t unshared = unshared_.load(std::memory_order_acquire);
  if (unshared != seen_unshared_) {
    seen_unshared_ = unshared;
    mappings_.clear();
  }
  for (const auto& m : mappings_)
    if (m->span.inode == span.inode && m->span.fd == span.fd && m->span.begin == span.begin &&
        m->span.length == span.length)
      return m;
  if (refused_) return nullptr;
  return map_new(span);
}

std::shared_ptr<const PeerPages::Mapping> PeerPages::map_new(const SharedSpan& span) {
  const int fd = owner_.copy_descriptor(int(span.fd));
  if (fd < 0) {
    // Not permitted, or no such call: the same answer every time. A descriptor
    // closed meanwhile (EBADF) is only this once.
    if (errno != EBADF) refused_ = true;
    return nullptr;
  }
  // The descriptor may have been closed and its number reused since the key was
  // read: the file must be the one published.
  struct stat st{};
  void* base = MAP_FAILED;
  if (fstat(fd, &st) == 0 && uint64_t(st.st_ino) == span.inode && uint64_t(st.st_size) >= span.length)
    base = mmap(nullptr, span.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return nullptr;
  auto mapping = std::make_shared<Mapping>();
  mapping->span = span;
  mapping->base = static_cast<uint8_t*>(base);
  if (mappings_.size() >= kMaxMappings) mappings_.erase(mappings_.begin());
  mappings_.push_back(mapping);
  return mapping;
}

uint64_t PeerPages::mapped_count() const {
  std::lock_guard lock(mutex_);
  return mappings_.size();
}

}  // namespace softrdma::samehost
