// Memory regions (IBA 10.6; ibv_reg_mr(3)): unpredictable keys, access rights,
// bounds and PD checks on every resolve, iova translation, revocation at dereg.
#include "engine/mr.h"

#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <fstream>
#include <thread>
#include <vector>

#include "engine/device.h"
#include "engine/roce/family.h"
#include "engine/pd.h"
#include "transport/fake/fake_network.h"

namespace softrdma::engine {
namespace {

namespace fake = transport::fake;

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
constexpr int kAllRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

class MrTest : public ::testing::Test {
 protected:
  void SetUp() override {
    transport_ = net_.attach(fake::ipv4_gid(10, 0, 0, 1));
    device_ = std::make_unique<Device>(DeviceConfig{}, *transport_, roce::RoceFamily::maker());
    int err = 0;
    pd_ = device_->alloc_pd(err);
    other_pd_ = device_->alloc_pd(err);
    ASSERT_NE(pd_, nullptr);
    ASSERT_NE(other_pd_, nullptr);
    buf_.assign(4096, 0);
  }

  uint64_t va(size_t offset = 0) const { return uint64_t(uintptr_t(buf_.data() + offset)); }

  Mr* reg(int access, uint64_t iova, size_t length = 4096, Pd* pd = nullptr) {
    int err = 0;
    Mr* mr = device_->reg_mr(pd != nullptr ? pd : pd_, buf_.data(), length, iova, access, err);
    EXPECT_NE(mr, nullptr) << "errno " << err;
    return mr;
  }

  // resolve() through a fresh Access; `why` reports the reason.
  uint8_t* resolve(uint32_t key, const Pd* pd, uint64_t at, uint64_t len, int need,
                   AccessError& why) const {
    auto access = device_->mrs().access();
    return access.resolve(key, pd, at, len, need, why);
  }

  fake::FakeNetwork net_;
  std::unique_ptr<fake::FakeTransport> transport_;
  std::unique_ptr<Device> device_;
  Pd* pd_ = nullptr;
  Pd* other_pd_ = nullptr;
  std::vector<uint8_t> buf_;
};

// Keys are unpredictable (DESIGN.md §7; IBA 10.6: an L_Key/R_Key is the only
// protection of a region): many registrations give distinct nonzero keys, no counter.
TEST_F(MrTest, KeysAreDistinctNonzeroAndNotSequential) {
  constexpr int kCount = 2000;
  std::vector<uint32_t> keys;
  for (int i = 0; i < kCount; ++i) {
    Mr* mr = reg(IBV_ACCESS_LOCAL_WRITE, va(), 64);
    ASSERT_NE(mr, nullptr);
    keys.push_back(mr->key);
  }
  std::set<uint32_t> distinct(keys.begin(), keys.end());
  EXPECT_EQ(distinct.size(), keys.size());
  EXPECT_EQ(distinct.count(0u), 0u);

  // A counter (or counter << 8, as hardware index+tag keys) shows as a constant or
  // small step between consecutive keys, and as monotonic keys.
  std::set<uint32_t> steps;
  int increasing = 0, small_steps = 0;
  for (size_t i = 1; i < keys.size(); ++i) {
    const uint32_t step = keys[i] - keys[i - 1];
    steps.insert(step);
    increasing += keys[i] > keys[i - 1];
    small_steps += (step < (1u << 16) || -step < (1u << 16));
  }
  EXPECT_GT(steps.size(), size_t(kCount * 9 / 10));
  EXPECT_GT(increasing, kCount / 4);
  EXPECT_LT(increasing, kCount * 3 / 4);
  EXPECT_LT(small_steps, kCount / 100);
  // Every bit of the key varies.
  uint32_t ones = 0, zeros = 0;
  for (uint32_t k : keys) {
    ones |= k;
    zeros |= ~k;
  }
  EXPECT_EQ(ones, 0xffffffffu);
  EXPECT_EQ(zeros, 0xffffffffu);
}

// Inverts MT19937's output tempering: the state word behind one output.
uint32_t mt19937_untemper(uint32_t y) {
  y ^= y >> 18;
  y ^= (y << 15) & 0xefc60000u;
  uint32_t r = y;
  for (int i = 0; i < 4; ++i) r = y ^ ((r << 7) & 0x9d2c5680u);
  y = r;
  return y ^ (y >> 11) ^ (y >> 22);
}

// Keys are not the raw output of a Mersenne Twister: from 624 keys a peer could
// rebuild its state and compute every key to come (DESIGN.md §7: a guessed key must
// not reach memory; keys must come from a cryptographically strong source).
TEST_F(MrTest, KeysCannotBePredictedFromEarlierKeys) {
  std::vector<uint32_t> seen;
  for (int i = 0; i < 624; ++i) seen.push_back(reg(0, va(), 16)->key);
  std::stringstream state;
  for (uint32_t k : seen) state << mt19937_untemper(k) << ' ';
  std::mt19937 predictor;
  state >> predictor;
  int predicted = 0;
  for (int i = 0; i < 16; ++i) predicted += reg(0, va(), 16)->key == predictor();
  EXPECT_EQ(predicted, 0) << "the next keys were computed from the previous 624";
}

// Two devices (two processes) do not hand out the same key sequence.
TEST_F(MrTest, KeysDifferBetweenDevices) {
  auto other_transport = net_.attach(fake::ipv4_gid(10, 0, 0, 2));
  Device other(DeviceConfig{}, *other_transport, roce::RoceFamily::maker());
  int err = 0;
  Pd* pd = other.alloc_pd(err);
  std::vector<uint32_t> mine, theirs;
  for (int i = 0; i < 8; ++i) {
    mine.push_back(reg(0, va(), 16)->key);
    theirs.push_back(other.reg_mr(pd, buf_.data(), 16, va(), 0, err)->key);
  }
  EXPECT_NE(mine, theirs);
}

// Remote write or remote atomic without local write is EINVAL (ibv_reg_mr(3):
// "then IBV_ACCESS_LOCAL_WRITE must be set too"; IBA 10.6.3.1).
TEST_F(MrTest, RemoteWriteOrAtomicNeedsLocalWrite) {
  int err = 0;
  for (int access : {int(IBV_ACCESS_REMOTE_WRITE), int(IBV_ACCESS_REMOTE_ATOMIC),
                     IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
                     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ}) {
    err = 0;
    EXPECT_EQ(device_->reg_mr(pd_, buf_.data(), 4096, va(), access, err), nullptr) << access;
    EXPECT_EQ(err, EINVAL) << access;
  }
  EXPECT_EQ(device_->mrs().size(), 0u);
  // Remote read alone, no rights at all, and every right together are fine.
  for (int access : {int(IBV_ACCESS_REMOTE_READ), 0, kAllRemote}) {
    Mr* mr = device_->reg_mr(pd_, buf_.data(), 4096, va(), access, err);
    ASSERT_NE(mr, nullptr) << access;
    EXPECT_EQ(mr->access, access);
  }
}

// An access flag verbs does not define is EINVAL (ibv_reg_mr(3) flag list).
TEST_F(MrTest, UnknownAccessFlagIsEinval) {
  int err = 0;
  EXPECT_EQ(device_->reg_mr(pd_, buf_.data(), 4096, va(), 1 << 30, err), nullptr);
  EXPECT_EQ(err, EINVAL);
}

// Memory that is not mapped cannot be registered (EFAULT, as the kernel's
// ib_umem_get answers): a peer writing there later would fault the progress thread.
TEST_F(MrTest, UnmappedMemoryIsEfault) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* hole = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(hole, MAP_FAILED);
  ASSERT_EQ(munmap(hole, 2 * page), 0);
  int err = 0;
  EXPECT_EQ(device_->reg_mr(pd_, hole, 2 * page, uint64_t(uintptr_t(hole)),
                            IBV_ACCESS_LOCAL_WRITE, err), nullptr);
  EXPECT_EQ(err, EFAULT);
  // Partly mapped (the buffer, then one page beyond what is ours) is refused too.
  void* half = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(half, MAP_FAILED);
  ASSERT_EQ(munmap(static_cast<char*>(half) + page, page), 0);
  EXPECT_EQ(device_->reg_mr(pd_, half, 2 * page, uint64_t(uintptr_t(half)), 0, err), nullptr);
  EXPECT_EQ(err, EFAULT);
  munmap(half, page);
}

// Read-only memory cannot be registered for writing (EFAULT, as the kernel's
// FOLL_WRITE pinning answers), but can be registered for reading.
TEST_F(MrTest, ReadOnlyMemoryCannotBeRegisteredForWriting) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* ro = mmap(nullptr, 2 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  int err = 0;
  EXPECT_EQ(device_->reg_mr(pd_, ro, 2 * page, uint64_t(uintptr_t(ro)),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, err), nullptr);
  EXPECT_EQ(err, EFAULT);
  Mr* readable = device_->reg_mr(pd_, ro, 2 * page, uint64_t(uintptr_t(ro)),
                                 IBV_ACCESS_REMOTE_READ, err);
  ASSERT_NE(readable, nullptr) << err;
  EXPECT_EQ(device_->dereg_mr(readable), 0);
  munmap(ro, 2 * page);
}

// A region longer than the device's max_mr_size is EINVAL (ibv_query_device).
TEST_F(MrTest, LongerThanMaxMrSizeIsEinval) {
  int err = 0;
  const uint64_t too_long = device_->limits().max_mr_size + 1;
  EXPECT_EQ(device_->reg_mr(pd_, buf_.data(), too_long, va(), 0, err), nullptr);
  EXPECT_EQ(err, EINVAL);
}

// A region whose host range wraps past the end of the address space is EINVAL
// (the kernel's ib_umem_get refuses addr + length < addr): translating into it
// would produce a wrapped, out-of-bounds host pointer.
TEST_F(MrTest, HostRangeWrappingTheAddressSpaceIsEinval) {
  int err = 0;
  void* near_top = reinterpret_cast<void*>(std::numeric_limits<uintptr_t>::max() - 100);
  EXPECT_EQ(device_->reg_mr(pd_, near_top, 4096, 0x1000, 0, err), nullptr);
  EXPECT_EQ(err, EINVAL);
}

// resolve() finds the region by key and hands back the host pointer for
// [va, va+len) when key, PD, bounds and rights all check (IBA 10.6.3, 9.7.5.1.5).
TEST_F(MrTest, ResolveChecksKeyPdBoundsAndAccess) {
  Mr* mr = reg(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, va());
  ASSERT_NE(mr, nullptr);
  AccessError why = AccessError::kNone;

  EXPECT_EQ(resolve(mr->key, pd_, va(16), 32, IBV_ACCESS_REMOTE_READ, why), buf_.data() + 16);
  EXPECT_EQ(why, AccessError::kNone);
  EXPECT_EQ(resolve(mr->key, pd_, va(), 4096, 0, why), buf_.data()) << "the whole region";

  EXPECT_EQ(resolve(mr->key ^ 1, pd_, va(), 8, 0, why), nullptr);
  EXPECT_EQ(why, AccessError::kBadKey);
  EXPECT_EQ(resolve(0, pd_, va(), 8, 0, why), nullptr);
  EXPECT_EQ(why, AccessError::kBadKey);

  EXPECT_EQ(resolve(mr->key, other_pd_, va(), 8, 0, why), nullptr);
  EXPECT_EQ(why, AccessError::kWrongPd);

  EXPECT_EQ(resolve(mr->key, pd_, va(), 8, IBV_ACCESS_REMOTE_WRITE, why), nullptr);
  EXPECT_EQ(why, AccessError::kNoPermission);
  EXPECT_EQ(resolve(mr->key, pd_, va(), 8, IBV_ACCESS_REMOTE_ATOMIC, why), nullptr);
  EXPECT_EQ(why, AccessError::kNoPermission);

  EXPECT_EQ(resolve(mr->key, pd_, va() - 1, 8, 0, why), nullptr);
  EXPECT_EQ(why, AccessError::kOutOfBounds);
  EXPECT_EQ(resolve(mr->key, pd_, va(4090), 7, 0, why), nullptr) << "one byte past the end";
  EXPECT_EQ(why, AccessError::kOutOfBounds);
  EXPECT_EQ(resolve(mr->key, pd_, va(4090), 6, 0, why), buf_.data() + 4090) << "up to the end";
  EXPECT_EQ(resolve(mr->key, pd_, va(), 4097, 0, why), nullptr);
  EXPECT_EQ(why, AccessError::kOutOfBounds);
  EXPECT_EQ(resolve(mr->key, pd_, va(4096), 1, 0, why), nullptr);
  EXPECT_EQ(why, AccessError::kOutOfBounds);
}

// Local read is always allowed; local write needs IBV_ACCESS_LOCAL_WRITE
// (ibv_reg_mr(3): "Local read access is always enabled for the MR").
TEST_F(MrTest, LocalReadAlwaysLocalWriteOnlyWhenGranted) {
  Mr* ro = reg(0, va());
  Mr* rw = reg(IBV_ACCESS_LOCAL_WRITE, va());
  AccessError why;
  EXPECT_NE(resolve(ro->key, pd_, va(), 64, 0, why), nullptr);
  EXPECT_EQ(resolve(ro->key, pd_, va(), 64, IBV_ACCESS_LOCAL_WRITE, why), nullptr);
  EXPECT_EQ(why, AccessError::kNoPermission);
  EXPECT_NE(resolve(rw->key, pd_, va(), 64, IBV_ACCESS_LOCAL_WRITE, why), nullptr);
  EXPECT_EQ(resolve(rw->key, pd_, va(), 64, IBV_ACCESS_REMOTE_READ, why), nullptr);
  EXPECT_EQ(why, AccessError::kNoPermission);
}

// Lengths and addresses near 2^64 never wrap a bounds check into success
// (DESIGN.md §7: an untrusted VA/length must not reach outside the region).
TEST_F(MrTest, BoundsChecksDoNotOverflow) {
  const uint64_t top_iova = kMax64 - 4095;  // region covers [2^64-4096, 2^64-1]
  Mr* top = reg(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, top_iova);
  Mr* low = reg(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, 0x1000);
  ASSERT_NE(top, nullptr);
  ASSERT_NE(low, nullptr);
  AccessError why;
  EXPECT_EQ(resolve(top->key, pd_, kMax64, 1, 0, why), buf_.data() + 4095) << "last byte";
  EXPECT_EQ(resolve(top->key, pd_, top_iova, 4096, 0, why), buf_.data());
  EXPECT_EQ(resolve(top->key, pd_, kMax64, 2, 0, why), nullptr) << "va+len wraps to 0";
  EXPECT_EQ(why, AccessError::kOutOfBounds);
  EXPECT_EQ(resolve(top->key, pd_, top_iova + 1, kMax64, 0, why), nullptr);
  EXPECT_EQ(resolve(top->key, pd_, kMax64, kMax64, 0, why), nullptr);

  EXPECT_EQ(resolve(low->key, pd_, 0x1800, kMax64 - 0x7ff, 0, why), nullptr)
      << "va+len wraps to exactly 0";
  EXPECT_EQ(why, AccessError::kOutOfBounds);
  EXPECT_EQ(resolve(low->key, pd_, 0x1800, uint64_t(1) << 63, 0, why), nullptr);
  EXPECT_EQ(resolve(low->key, pd_, kMax64, 1, 0, why), nullptr);
  EXPECT_EQ(resolve(low->key, pd_, 0, 0x1001, 0, why), nullptr) << "starts below the region";
  EXPECT_EQ(resolve(low->key, pd_, 0x1000 + 0x1000, 0, 0, why), buf_.data() + 4096)
      << "an empty range at the end is inside";
}

// A zero-length access inside (or at the end of) the region resolves; one outside it
// does not (IBA 9.7.5.1.5: zero-length RDMA is valid; bounds still apply here).
TEST_F(MrTest, ZeroLengthAccess) {
  Mr* mr = reg(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0x10000);
  AccessError why;
  EXPECT_EQ(resolve(mr->key, pd_, 0x10000, 0, IBV_ACCESS_REMOTE_WRITE, why), buf_.data());
  EXPECT_EQ(resolve(mr->key, pd_, 0x10000 + 100, 0, 0, why), buf_.data() + 100);
  EXPECT_EQ(resolve(mr->key, pd_, 0x10000 + 4096, 0, 0, why), buf_.data() + 4096);
  EXPECT_EQ(resolve(mr->key, pd_, 0x10000 + 4097, 0, 0, why), nullptr);
  EXPECT_EQ(why, AccessError::kOutOfBounds);
  EXPECT_EQ(resolve(mr->key, pd_, 0xffff, 0, 0, why), nullptr);
  EXPECT_EQ(why, AccessError::kOutOfBounds);

  // A zero-length region exists and has a key, but holds no byte.
  Mr* empty = reg(IBV_ACCESS_LOCAL_WRITE, 0x20000, 0);
  ASSERT_NE(empty, nullptr);
  EXPECT_NE(empty->key, 0u);
  EXPECT_EQ(resolve(empty->key, pd_, 0x20000, 1, 0, why), nullptr);
  EXPECT_EQ(why, AccessError::kOutOfBounds);
}

// The peers address the region by its iova, not by the host address
// (ibv_reg_mr_iova(3): offset = va - iova); IBV_ACCESS_ZERO_BASED means iova 0.
TEST_F(MrTest, IovaTranslation) {
  const uint64_t iova = 0xdead0000;
  Mr* mr = reg(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, iova);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->iova, iova);
  EXPECT_EQ(mr->addr, buf_.data());
  AccessError why;
  EXPECT_EQ(resolve(mr->key, pd_, iova + 0x10, 4, IBV_ACCESS_REMOTE_READ, why),
            buf_.data() + 0x10);
  EXPECT_EQ(resolve(mr->key, pd_, iova + 4095, 1, 0, why), buf_.data() + 4095);
  if (va() + 4096 <= iova || va() >= iova + 4096) {
    EXPECT_EQ(resolve(mr->key, pd_, va(), 4, 0, why), nullptr) << "the host address is not a VA";
  }

  int err = 0;
  Mr* zero = device_->reg_mr(pd_, buf_.data(), 4096, va(),
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED, err);
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(zero->iova, 0u);
  EXPECT_EQ(resolve(zero->key, pd_, 5, 10, 0, why), buf_.data() + 5);
}

// Deregistration revokes the key at once: the next resolve fails with a bad key
// (DESIGN.md §7; IBA 10.6.3.5).
TEST_F(MrTest, DeregRevokesAtOnce) {
  Mr* mr = reg(kAllRemote, va());
  const uint32_t key = mr->key;
  AccessError why;
  ASSERT_NE(resolve(key, pd_, va(), 8, IBV_ACCESS_REMOTE_WRITE, why), nullptr);
  EXPECT_EQ(device_->mrs().size(), 1u);
  ASSERT_EQ(device_->dereg_mr(mr), 0);
  EXPECT_EQ(resolve(key, pd_, va(), 8, IBV_ACCESS_REMOTE_WRITE, why), nullptr);
  EXPECT_EQ(why, AccessError::kBadKey);
  EXPECT_EQ(device_->mrs().access().find(key), nullptr);
  EXPECT_EQ(device_->mrs().size(), 0u);
}

// Deregistration waits for a lookup in progress: memory a resolve handed out stays
// registered while its Access lives (so a responder never copies into freed memory).
// The test waits for the deregistering thread to be asleep (its state in /proc),
// not for a time: then dereg has not returned because it is waiting.
TEST_F(MrTest, DeregWaitsForAccessInUse) {
  Mr* mr = reg(kAllRemote, va());
  const uint32_t key = mr->key;
  std::atomic<bool> dereg_done{false};
  std::atomic<pid_t> deregger_tid{0};
  std::thread deregger;
  {
    auto access = device_->mrs().access();
    AccessError why;
    ASSERT_NE(access.resolve(key, pd_, va(), 8, 0, why), nullptr);
    deregger = std::thread([&] {
      deregger_tid = gettid();
      EXPECT_EQ(device_->dereg_mr(mr), 0);
      dereg_done = true;
    });
    auto asleep = [&] {
      const pid_t tid = deregger_tid.load();
      if (tid == 0) return false;
      std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
      std::string line;
      std::getline(stat, line);
      const size_t paren = line.rfind(')');
      return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'S';
    };
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!asleep() && !dereg_done.load() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::yield();
    EXPECT_FALSE(dereg_done.load()) << "dereg returned while the region was in use";
    EXPECT_TRUE(asleep()) << "the deregistering thread waits";
    EXPECT_NE(access.find(key), nullptr);
  }
  deregger.join();
  EXPECT_TRUE(dereg_done.load());
  AccessError why;
  EXPECT_EQ(resolve(key, pd_, va(), 8, 0, why), nullptr);
}

// Deregistering the same MR twice is EINVAL the second time, not a crash
// (ibv_dereg_mr(3) returns an errno on failure).
TEST_F(MrTest, DeregTwiceIsEinval) {
  Mr* mr = reg(0, va());
  ASSERT_EQ(device_->dereg_mr(mr), 0);
  EXPECT_EQ(device_->dereg_mr(mr), EINVAL);
}

// A PD with registered MRs cannot be deallocated: EBUSY until they are gone
// (ibv_alloc_pd(3) / IBA 10.2.3: resources still reference it).
TEST_F(MrTest, PdWithMrsIsBusy) {
  Mr* a = reg(0, va());
  Mr* b = reg(IBV_ACCESS_LOCAL_WRITE, va());
  EXPECT_EQ(device_->dealloc_pd(pd_), EBUSY);
  ASSERT_EQ(device_->dereg_mr(a), 0);
  EXPECT_EQ(device_->dealloc_pd(pd_), EBUSY);
  ASSERT_EQ(device_->dereg_mr(b), 0);
  EXPECT_EQ(device_->dealloc_pd(pd_), 0);
  pd_ = nullptr;
}

// Registering the same memory several times gives independent regions with their own
// keys and rights (IBA 10.6.1: regions may overlap).
TEST_F(MrTest, OverlappingRegistrationsAreIndependent) {
  Mr* ro = reg(IBV_ACCESS_REMOTE_READ, va());
  Mr* rw = reg(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, va(), 1024);
  ASSERT_NE(ro->key, rw->key);
  AccessError why;
  EXPECT_EQ(resolve(ro->key, pd_, va(), 8, IBV_ACCESS_REMOTE_WRITE, why), nullptr);
  EXPECT_NE(resolve(rw->key, pd_, va(), 8, IBV_ACCESS_REMOTE_WRITE, why), nullptr);
  EXPECT_EQ(resolve(rw->key, pd_, va(2048), 8, 0, why), nullptr);
  EXPECT_NE(resolve(ro->key, pd_, va(2048), 8, IBV_ACCESS_REMOTE_READ, why), nullptr);
  ASSERT_EQ(device_->dereg_mr(ro), 0);
  EXPECT_NE(resolve(rw->key, pd_, va(), 8, IBV_ACCESS_REMOTE_WRITE, why), nullptr);
}

}  // namespace
}  // namespace softrdma::engine

namespace softrdma::engine {
namespace {

// ibv_rereg_mr(3): the MR keeps its key and takes the new range, PD and rights at
// once; cached translations go (the generation moves on); a refused change leaves
// the MR as it was.
class MrReregTest : public MrTest {};

TEST_F(MrReregTest, NewRangePdAndRightsApplyAtOnceUnderTheSameKey) {
  Mr* mr = reg(IBV_ACCESS_LOCAL_WRITE, va(), 1024);
  ASSERT_NE(mr, nullptr);
  const uint32_t key = mr->key;
  const uint64_t generation = device_->mrs().generation();
  AccessError why;
  EXPECT_EQ(resolve(key, pd_, va(2048), 8, IBV_ACCESS_REMOTE_WRITE, why), nullptr);
  ASSERT_EQ(device_->rereg_mr(mr, other_pd_, buf_.data() + 2048, 2048,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE), 0);
  EXPECT_EQ(mr->key, key);
  EXPECT_GT(device_->mrs().generation(), generation) << "cached translations must go";
  EXPECT_EQ(resolve(key, other_pd_, va(2048), 8, IBV_ACCESS_REMOTE_WRITE, why),
            buf_.data() + 2048);
  EXPECT_EQ(resolve(key, pd_, va(2048), 8, IBV_ACCESS_REMOTE_WRITE, why), nullptr);
  EXPECT_EQ(why, AccessError::kWrongPd);
  EXPECT_EQ(resolve(key, other_pd_, va(0), 8, 0, why), nullptr) << "the old range is gone";
  EXPECT_EQ(why, AccessError::kOutOfBounds);
  EXPECT_EQ(pd_->users.load(), 0u);
  EXPECT_EQ(other_pd_->users.load(), 1u);
  EXPECT_EQ(device_->dereg_mr(mr), 0);
}

TEST_F(MrReregTest, ARefusedChangeLeavesTheMrAsItWas) {
  Mr* mr = reg(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, va(), 4096);
  ASSERT_NE(mr, nullptr);
  // IBA 10.6.3.1: remote write needs local write.
  EXPECT_EQ(device_->rereg_mr(mr, pd_, buf_.data(), 4096, IBV_ACCESS_REMOTE_WRITE), EINVAL);
  AccessError why;
  EXPECT_EQ(resolve(mr->key, pd_, va(100), 8, IBV_ACCESS_REMOTE_READ, why), buf_.data() + 100);
  EXPECT_EQ(device_->dereg_mr(mr), 0);
  EXPECT_EQ(device_->rereg_mr(mr, pd_, buf_.data(), 4096, IBV_ACCESS_LOCAL_WRITE), EINVAL)
      << "a deregistered MR";
}

}  // namespace
}  // namespace softrdma::engine
