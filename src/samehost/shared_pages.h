// Registered memory that processes of the same host reach with loads and stores
// (docs/decisions/same-host.md, "Shared pages"). A cross-memory-attach call costs
// about 2 µs here, whatever it copies; an RDMA NIC's DMA engine costs nothing the
// target can see. So the whole pages of a registered region are moved, in place,
// onto a memory file (memfd_create(2)): same addresses, same contents, now a shared
// mapping. A peer that may act for the owner (the ptrace check of cross-memory
// attach, which pidfd_getfd(2) makes too) maps the same file and copies with
// memcpy; the owner never runs.
//
// What it gives a peer is no more than it had: a process that may ptrace another
// may already read and write all of its memory. What the owner keeps: the pages
// go back to private memory, contents kept, when the region is deregistered, so a
// peer's old mapping then reaches only a file nobody else uses.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "samehost/process_memory.h"

namespace softrdma::samehost {

// Where a region's shared pages are, as peers learn it from the key table.
struct SharedSpan {
  uint64_t begin = 0;   // the owner's address of the first shared byte (page aligned)
  uint64_t length = 0;  // 0: the region has no shared pages
  uint64_t inode = 0;   // the memory file's, to tell it from a later file
  uint32_t fd = 0;      // the owner's descriptor of it
  bool contains(uint64_t addr, uint64_t n) const {
    return length != 0 && addr >= begin && n <= length && addr - begin <= length - n;
  }
};

// The owner's side: the whole pages of one registered region, moved onto a file.
class SharedPages {
 public:
  // The whole pages inside [addr, addr + length), if they are private anonymous
  // read-write memory (not a file's, not the stack's, not huge pages); null and
  // why when they are not, or when there is no whole page.
  static std::unique_ptr<SharedPages> share(void* addr, uint64_t length, std::string& why);
  // Moves the pages back to private anonymous memory, contents kept, unless the
  // application unmapped or replaced them (then they are left alone).
  ~SharedPages();
  SharedPages(const SharedPages&) = delete;
  SharedPages& operator=(const SharedPages&) = delete;

  const SharedSpan& span() const { return span_; }

 private:
  SharedPages(const SharedSpan& span, int fd) : span_(span), fd_(fd) {}
  bool still_ours() const;

  SharedSpan span_;
  int fd_;
};

// A peer's side: the shared pages of one owner process mapped here, on demand,
// through its pidfd. Thread-safe; a mapping lives while someone holds it.
class PeerPages {
 public:
  struct Mapping {
    SharedSpan span;
    uint8_t* base = nullptr;
    ~Mapping();
    // This process's address of the owner's `addr` (inside span).
    uint8_t* at(uint64_t addr) const { return base + (addr - span.begin); }
  };

  // The owner's memory (not owned: it outlives this); `unshared` counts the
  // owner's unsharings, read to drop mappings of files it no longer uses.
  PeerPages(const ProcessMemory& owner, const std::atomic<uint64_t>& unshared)
      : owner_(owner), unshared_(unshared) {}
  // The mapping of `span`, mapped now if it is not yet; null when it cannot be
  // (no pidfd_getfd, not permitted, the file is no longer the one published).
  std::shared_ptr<const Mapping> map(const SharedSpan& span);
  uint64_t mapped_count() const;

 private:
  static constexpr size_t kMaxMappings = 64;
  std::shared_ptr<const Mapping> map_new(const SharedSpan& span);

  const ProcessMemory& owner_;
  const std::atomic<uint64_t>& unshared_;
  mutable std::mutex mutex_;
  uint64_t seen_unshared_ = 0;
  bool refused_ = false;  // pidfd_getfd refused once: it will be again
  std::vector<std::shared_ptr<const Mapping>> mappings_;
};

}  // namespace softrdma::samehost
