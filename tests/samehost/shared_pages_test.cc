// A registered region's whole pages moved onto a memory file in place, mapped by a
// peer through its pidfd, and given back (samehost/shared_pages.h). The peer here
// is this process itself: pidfd_getfd(2) and mmap(2) are what a peer does.
#include "samehost/shared_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace softrdma::samehost {
namespace {

const uint64_t kPage = uint64_t(sysconf(_SC_PAGESIZE));
uint64_t probe_word = 0x5eed5eed5eed5eedull;

// The /proc/self/maps line of the mapping that holds `addr`.
std::string mapping_of(const void* addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto at = reinterpret_cast<uintptr_t>(addr);
  while (std::getline(maps, line)) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) == 2 && at >= begin && at < end)
      return line;
  }
  return {};
}

struct Region {
  uint8_t* base = nullptr;
  size_t length = 0;
  explicit Region(size_t pages) : length(pages * kPage) {
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~Region() {
    if (base != nullptr) munmap(base, length);
  }
};

// A region from the middle of page 0 to the middle of page 3: pages 1 and 2 are
// whole, and only they move; every byte keeps its value and its address.
TEST(SharedPages, OnlyTheWholePagesMoveAndKeepTheirContents) {
  Region r(4);
  ASSERT_NE(r.base, nullptr);
  for (size_t i = 0; i < r.length; ++i) r.base[i] = uint8_t(i * 7 + 1);
  std::string why;
  auto shared = SharedPages::share(r.base + kPage / 2, 3 * kPage, why);
  ASSERT_NE(shared, nullptr) << why;
  EXPECT_EQ(shared->span().begin, uint64_t(uintptr_t(r.base + kPage)));
  EXPECT_EQ(shared->span().length, 2 * kPage);
  for (size_t i = 0; i < r.length; ++i) ASSERT_EQ(r.base[i], uint8_t(i * 7 + 1)) << i;
  EXPECT_NE(mapping_of(r.base + kPage).find("memfd:softrdma-mr"), std::string::npos)
      << mapping_of(r.base + kPage);
  EXPECT_EQ(mapping_of(r.base).find("memfd"), std::string::npos) << "the edge page stays";
  r.base[kPage + 5] = 0xaa;
  shared.reset();
  EXPECT_EQ(mapping_of(r.base + kPage).find("memfd"), std::string::npos)
      << "given back to private memory";
  EXPECT_EQ(r.base[kPage + 5], 0xaa);
  EXPECT_EQ(r.base[2 * kPage + 9], uint8_t((2 * kPage + 9) * 7 + 1));
}

// UCX's registration cache frees a buffer before it deregisters it. The pages go
// back to private memory from the file, never read through the freed buffer's
// addresses: the sanitizer build (ASan keeps freed memory mapped, in quarantine)
// reported a read of freed memory in ~SharedPages before (ucx_perftest at exit).
// In a release build glibc unmaps the freed buffer, and nothing is moved back.
TEST(SharedPages, ABufferFreedBeforeItIsGivenBackIsNotReadThroughItsAddresses) {
  void* buffer = nullptr;
  ASSERT_EQ(posix_memalign(&buffer, kPage, 64 * kPage), 0);
  std::memset(buffer, 0x5a, 64 * kPage);
  std::string why;
  auto shared = SharedPages::share(buffer, 64 * kPage, why);
  ASSERT_NE(shared, nullptr) << why;
  EXPECT_EQ(static_cast<uint8_t*>(buffer)[5 * kPage], 0x5a);
  free(buffer);
  shared.reset();
}

// A peer's mapping and the owner's pages are the same memory while shared, and
// apart once the owner gave them back.
TEST(SharedPages, APeersMappingIsTheOwnersMemoryUntilGivenBack) {
  Region r(2);
  ASSERT_NE(r.base, nullptr);
  std::string why;
  auto shared = SharedPages::share(r.base, r.length, why);
  ASSERT_NE(shared, nullptr) << why;
  Reach reach;
  auto owner = ProcessMemory::attach(getpid(), uint64_t(uintptr_t(&probe_word)), probe_word, reach);
  ASSERT_NE(owner, nullptr) << describe(reach);
  std::atomic<uint64_t> unshared{0};
  PeerPages peer(*owner, unshared);
  auto mapping = peer.map(shared->span());
  ASSERT_NE(mapping, nullptr);
  EXPECT_NE(mapping->base, r.base) << "a mapping of its own";
  *mapping->at(uint64_t(uintptr_t(r.base + 100))) = 42;
  EXPECT_EQ(r.base[100], 42) << "a peer's store is the owner's memory";
  r.base[200] = 43;
  EXPECT_EQ(*mapping->at(uint64_t(uintptr_t(r.base + 200))), 43);
  EXPECT_EQ(peer.map(shared->span()), mapping) << "mapped once";

  shared.reset();
  unshared.fetch_add(1);
  *mapping->at(uint64_t(uintptr_t(r.base + 100))) = 99;
  EXPECT_EQ(r.base[100], 42) << "after it was given back, the peer reaches an orphan file";
  EXPECT_EQ(peer.mapped_count(), 1u);
  SharedSpan stale = mapping->span;
  mapping.reset();
  EXPECT_EQ(peer.map(stale), nullptr) << "the descriptor is closed: nothing to map";
  EXPECT_EQ(peer.mapped_count(), 0u) << "mappings dropped once the owner unshared";
}

// What is not private anonymous memory, or not a whole page, stays where it is.
TEST(SharedPages, RefusesFilePagesAndPartialPages) {
  std::string why;
  Region r(1);
  ASSERT_NE(r.base, nullptr);
  EXPECT_EQ(SharedPages::share(r.base + 1, kPage - 1, why), nullptr);
  EXPECT_EQ(why, "no whole page");
  FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(ftruncate(fileno(file), off_t(kPage)), 0);
  void* mapped = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fileno(file), 0);
  ASSERT_NE(mapped, MAP_FAILED);
  EXPECT_EQ(SharedPages::share(mapped, kPage, why), nullptr);
  EXPECT_EQ(why, "not private anonymous read-write memory");
  munmap(mapped, kPage);
  std::fclose(file);
  void* read_only = mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(read_only, MAP_FAILED);
  EXPECT_EQ(SharedPages::share(read_only, kPage, why), nullptr);
  munmap(read_only, kPage);
}

// The application replaced the pages before deregistering: they are left alone.
TEST(SharedPages, PagesTheApplicationReplacedAreLeftAlone) {
  Region r(1);
  ASSERT_NE(r.base, nullptr);
  std::string why;
  auto shared = SharedPages::share(r.base, r.length, why);
  ASSERT_NE(shared, nullptr) << why;
  ASSERT_EQ(mmap(r.base, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0),
            r.base);
  r.base[0] = 7;
  shared.reset();
  EXPECT_EQ(r.base[0], 7);
  EXPECT_EQ(mapping_of(r.base).find("memfd"), std::string::npos);
}

}  // namespace
}  // namespace softrdma::samehost
