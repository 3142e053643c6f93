// Node segments (samehost/node_segment.h): what a process publishes for the
// processes of its host, found by any of its GIDs; revocation that waits for
// accesses in flight; faults queued to the owner; a lock that survives a dead
// holder; and names that no planted link or foreign file can hijack.
#include "samehost/node_segment.h"
#include "samehost/peer_node.h"

#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <vector>
#include <thread>

#include "samehost/host.h"
#include "wire/qpn_blocks.h"
#include "support/eventually.h"

namespace softrdma::samehost {
namespace {

class NodeSegmentTest : public ::testing::Test {
 protected:
  NodeSegmentTest() {
    char name[] = "/tmp/softrdma-node-test.XXXXXX";
    dir_ = std::string(mkdtemp(name)) + "/";
  }
  ~NodeSegmentTest() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  static Gid gid(uint8_t last) {
    Gid g{};
    g[10] = g[11] = 0xff;
    g[12] = 10;
    g[15] = last;
    return g;
  }
  std::unique_ptr<NodeSegment> create(std::vector<Gid> gids) {
    std::string why;
    auto node = NodeSegment::create(gids, why, dir_);
    EXPECT_NE(node, nullptr) << why;
    return node;
  }
  std::unique_ptr<PeerNode> open(const Gid& g) {
    std::string why;
    return PeerNode::open(g, why, dir_);
  }
  std::string dir_;
};

TEST_F(NodeSegmentTest, EveryGidNamesTheSegmentAndOnlyItsOwnerMayOpenIt) {
  auto node = create({gid(1), gid(2)});
  ASSERT_NE(node, nullptr);
  ASSERT_EQ(node->names().size(), 2u);
  for (const std::string& name : node->names()) {
    struct stat st {};
    ASSERT_EQ(lstat(name.c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(st.st_uid, geteuid());
  }
  for (uint8_t g : {1, 2}) {
    auto peer = open(gid(g));
    ASSERT_NE(peer, nullptr);
    EXPECT_EQ(peer->pid(), getpid());
    EXPECT_TRUE(peer->serving());
  }
  EXPECT_EQ(open(gid(3)), nullptr);
  const auto names = node->names();
  node.reset();
  for (const std::string& name : names) EXPECT_FALSE(std::filesystem::exists(name)) << name;
}

TEST_F(NodeSegmentTest, KeysAndQpsArePublishedAndRevoked) {
  auto node = create({gid(1)});
  auto peer = open(gid(1));
  ASSERT_NE(peer, nullptr);
  node->publish_key(0xabcd, KeyGrant{0x1000, 0x2000, 4096, 3, IBV_ACCESS_REMOTE_WRITE, 0});
  node->publish_qp(77, QpGrant{IBV_QPS_RTS, IBV_QPT_UD, 3, IBV_ACCESS_REMOTE_READ, 78, 5, 12,
                               0x80000011, 0xfffffff0});
  ASSERT_TRUE(peer->join());
  peer->begin_access();
  const auto key = peer->key(0xabcd);
  peer->end_access();
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->host_addr, 0x1000u);
  EXPECT_EQ(key->iova, 0x2000u);
  EXPECT_EQ(key->length, 4096u);
  EXPECT_EQ(key->pd, 3u);
  EXPECT_EQ(key->access, uint32_t(IBV_ACCESS_REMOTE_WRITE));
  const auto qp = peer->qp(77);
  ASSERT_TRUE(qp.has_value());
  EXPECT_EQ(qp->state, uint32_t(IBV_QPS_RTS));
  EXPECT_EQ(qp->type, uint32_t(IBV_QPT_UD));
  EXPECT_EQ(qp->dest_qpn, 78u);
  EXPECT_EQ(qp->recv_queue, 5u);
  EXPECT_EQ(qp->min_rnr_timer, 12u);
  EXPECT_EQ(qp->qkey, 0x80000011u);  // all 32 bits (IBA 10.2.5: the high bit too)
  EXPECT_EQ(qp->xrcd, 0xfffffff0u);
  node->revoke_key(0xabcd);
  node->remove_qp(77);
  EXPECT_FALSE(peer->key(0xabcd).has_value());
  EXPECT_FALSE(peer->qp(77).has_value());
}

// An XRC SRQ shares the QP table, under a key no QPN can have: SRQ 77 and QP 77
// are told apart.
TEST_F(NodeSegmentTest, XrcSrqsArePublishedBesideQpsOfTheSameNumber) {
  auto node = create({gid(1)});
  auto peer = open(gid(1));
  ASSERT_NE(peer, nullptr);
  node->publish_qp(77, QpGrant{IBV_QPS_RTR, IBV_QPT_XRC_RECV, 0, 0, 5, 0, 1, 0, 9});
  node->publish_xrc_srq(77, SrqGrant{4, 9, 12});
  const auto srq = peer->xrc_srq(77);
  ASSERT_TRUE(srq.has_value());
  EXPECT_EQ(srq->pd, 4u);
  EXPECT_EQ(srq->xrcd, 9u);
  EXPECT_EQ(srq->recv_queue, 12u);
  EXPECT_EQ(peer->qp(77)->type, uint32_t(IBV_QPT_XRC_RECV));
  EXPECT_FALSE(peer->xrc_srq(78).has_value());
  node->remove_xrc_srq(77);
  EXPECT_FALSE(peer->xrc_srq(77).has_value());
  EXPECT_TRUE(peer->qp(77).has_value());
}

// CPU time `clock` (a thread's, pthread_getcpuclockid) has counted, in ns.
int64_t thread_cpu_ns(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// ibv_dereg_mr(3) must not return while a peer still writes through the key: the
// revocation waits for the access that began before it.
TEST_F(NodeSegmentTest, RevocationWaitsForAnAccessInFlight) {
  auto node = create({gid(1)});
  auto peer = open(gid(1));
  ASSERT_TRUE(peer->join());
  node->publish_key(9, KeyGrant{1, 1, 1, 1, IBV_ACCESS_REMOTE_WRITE, 0});
  peer->begin_access();
  ASSERT_TRUE(peer->key(9).has_value());
  std::atomic<bool> revoked{false};
  std::thread owner([&] {
    node->revoke_key(9);
    revoked.store(true);
  });
  clockid_t owner_cpu;
  ASSERT_EQ(pthread_getcpuclockid(owner.native_handle(), &owner_cpu), 0);
  // The key is gone for new lookups at once; the revocation still waits.
  while (peer->key(9).has_value()) std::this_thread::yield();
  // Expect: the owner's thread is busy inside revoke_key, waiting for the access:
  // it keeps running (2 ms on a CPU after the key went, where a revocation that
  // did not wait returns within microseconds) and has not returned.
  const int64_t cpu_at_removal = thread_cpu_ns(owner_cpu);
  EXPECT_TRUE(testing_support::eventually([&] {
    return revoked.load() || thread_cpu_ns(owner_cpu) - cpu_at_removal > 2'000'000;
  })) << "the revoking thread never ran";
  EXPECT_FALSE(revoked.load()) << "returned while an access through the key was in flight";
  peer->end_access();
  owner.join();
  EXPECT_TRUE(revoked.load());
}

// A peer that exited inside an access is gone even while its parent has not
// reaped it (a zombie answers kill(pid, 0)): the revocation does not wait for an
// access that will never end. (A test harness that waits for its client before
// its server left the server a zombie, and the client's ibv_dereg_mr spun until
// the harness gave up.)
TEST_F(NodeSegmentTest, RevocationDoesNotWaitForAPeerThatExitedInAnAccessUnreaped) {
  auto node = create({gid(1)});
  node->publish_key(9, KeyGrant{1, 1, 1, 1, IBV_ACCESS_REMOTE_WRITE, 0});
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto peer = open(gid(1));
    if (!peer || !peer->join()) _exit(1);
    peer->begin_access();
    _exit(peer->key(9).has_value() ? 0 : 2);  // inside the access
  }
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, id_t(child), &info, WEXITED | WNOWAIT), 0);  // a zombie now
  ASSERT_EQ(info.si_status, 0) << "the child did not begin its access";
  auto revoked = std::async(std::launch::async, [&] { node->revoke_key(9); });
  // A guard against a hang (nothing is timed): 30 s, then the zombie is reaped,
  // which ends the wait either way.
  const bool returned = revoked.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  revoked.get();
  EXPECT_TRUE(returned) << "the revocation waited for a zombie's access";
}

// A process whose main thread exited while another runs ("Zl" in ps: its leader
// is a zombie) is alive: its files and accesses are not released. Once the last
// thread is gone and it waits for its parent, it is not. (The first version of
// the zombie check took the former for dead: a process exiting with its progress
// thread still up had its registry slot reaped and taken while it held it.)
TEST(ProcessExists, AProcessWithALiveThreadIsAliveAndAZombieIsNot) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    static int ready_fd = ready[1];
    pthread_t worker;
    pthread_create(&worker, nullptr, [](void*) -> void* {
      char one = 1;
      if (write(ready_fd, &one, 1) != 1) _exit(1);
      for (;;) pause();  // until killed
    }, nullptr);
    // The leader goes and the worker keeps the process. The exit system call ends
    // only the calling thread, and unlike pthread_exit it unwinds nothing (gtest's
    // frames would take the forced unwind for an exception).
    syscall(SYS_exit, 0);
  }
  close(ready[1]);  // a child that died before its worker wrote: read() sees the end
  char one = 0;
  ASSERT_EQ(read(ready[0], &one, 1), 1) << "the child's worker never ran";
  // The leader's exit is asynchronous to the worker's start: until it is a
  // zombie, this tells nothing new; wait for the event, then judge.
  EXPECT_TRUE(testing_support::eventually([&] {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t end = text.rfind(')');
    return end != std::string::npos && end + 2 < text.size() && text[end + 2] == 'Z';
  })) << "the leader never exited";
  EXPECT_TRUE(process_exists(child)) << "a process with a live thread was taken for dead";
  kill(child, SIGKILL);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, id_t(child), &info, WEXITED | WNOWAIT), 0);  // a zombie, unreaped
  EXPECT_FALSE(process_exists(child)) << "an exited process waiting for its parent";
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(process_exists(child));
  close(ready[0]);
}

TEST_F(NodeSegmentTest, FaultsReachTheOwnerInOrderAndAFullQueueRefuses) {
  auto node = create({gid(1)});
  auto peer = open(gid(1));
  EXPECT_FALSE(node->faults_pending());
  for (uint32_t i = 0; i < NodeLayout::kFaults; ++i) ASSERT_TRUE(peer->report_fault(100 + i, 7));
  EXPECT_FALSE(peer->report_fault(1, 1)) << "full";
  EXPECT_TRUE(node->faults_pending());
  uint32_t qpn, event;
  for (uint32_t i = 0; i < NodeLayout::kFaults; ++i) {
    ASSERT_TRUE(node->take_fault(qpn, event));
    EXPECT_EQ(qpn, 100 + i);
    EXPECT_EQ(event, 7u);
  }
  EXPECT_FALSE(node->take_fault(qpn, event));
  EXPECT_TRUE(peer->report_fault(5, 6)) << "room again";
}

// A peer that died holding the ATOMIC lock does not block the host's atomics.
TEST_F(NodeSegmentTest, TheAtomicsLockOutlivesAHolderThatDied) {
  auto node = create({gid(1)});
  const pid_t child = fork();
  if (child == 0) {
    auto peer = open(gid(1));
    new AtomicsGuard(peer->header());  // held, never released
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  pthread_mutex_t& lock = node->header().atomics;
  ASSERT_EQ(pthread_mutex_trylock(&lock), EOWNERDEAD) << "held by the dead child";
  pthread_mutex_consistent(&lock);
  pthread_mutex_unlock(&lock);
  { AtomicsGuard guard(node->header()); }  // takes and releases it
  EXPECT_EQ(pthread_mutex_trylock(&lock), 0);
  pthread_mutex_unlock(&lock);
}

// A process killed before its destructor ran leaves its names; the next process
// of the user that publishes removes them.
TEST_F(NodeSegmentTest, AKilledProcesssSegmentIsRemovedByTheNext) {
  const pid_t child = fork();
  if (child == 0) {
    std::string why;
    auto node = NodeSegment::create(std::vector<Gid>{gid(4)}, why, dir_);
    _exit(node != nullptr ? 0 : 1);  // no destructor runs
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const std::string name = node_name(gid(4), dir_);
  ASSERT_TRUE(std::filesystem::exists(name)) << "left behind";
  EXPECT_EQ(remove_stale_node_segments(dir_), 1);
  EXPECT_FALSE(std::filesystem::exists(name));
}

// A peer that mapped a segment whose owner was killed (no destructor said it no
// longer serves) learns it when the segment is removed as stale: the process
// taking over the address removes it before it sends anything, so what a peer
// sends to the address next does not land in the dead process (issue 27,
// finding 4). Its pidfd would say so too, but is asked once a coarse clock tick.
TEST_F(NodeSegmentTest, ARemovedStaleSegmentNoLongerServesItsPeers) {
  const pid_t child = fork();
  if (child == 0) {
    std::string why;
    auto node = NodeSegment::create(std::vector<Gid>{gid(7)}, why, dir_);
    _exit(node != nullptr ? 0 : 1);  // no destructor runs, as for a SIGKILL
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto peer = open(gid(7));
  ASSERT_NE(peer, nullptr);
  ASSERT_TRUE(peer->serving()) << "its owner never said otherwise";
  EXPECT_EQ(remove_stale_node_segments(dir_), 1);
  EXPECT_FALSE(peer->serving());
}

// A link planted at the name is neither followed nor replaced; its target is
// untouched, and the device goes on without a node segment.
TEST_F(NodeSegmentTest, APlantedLinkIsNotFollowed) {
  const std::string victim = dir_ + "victim";
  {
    const int fd = ::open(victim.c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "keep", 4), 4);
    close(fd);
  }
  ASSERT_EQ(symlink(victim.c_str(), node_name(gid(5), dir_).c_str()), 0);
  std::string why;
  EXPECT_EQ(NodeSegment::create(std::vector<Gid>{gid(5)}, why, dir_), nullptr);
  EXPECT_NE(why.find("File exists"), std::string::npos) << why;
  EXPECT_EQ(std::filesystem::file_size(victim), 4u);
  EXPECT_EQ(open(gid(5)), nullptr) << "a peer does not follow it either";
}

// A file another user planted under a GID's name is not believed by peers.
TEST_F(NodeSegmentTest, AForeignFileIsNotOpened) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to plant a file as another user";
  auto node = create({gid(6)});
  const std::string name = node_name(gid(6), dir_);
  const passwd* nobody = getpwnam("nobody");
  ASSERT_EQ(chown(name.c_str(), nobody != nullptr ? nobody->pw_uid : 65534, 0), 0);
  std::string why;
  EXPECT_EQ(PeerNode::open(gid(6), why, dir_), nullptr);
  EXPECT_NE(why.find("not a node segment of this user"), std::string::npos) << why;
}

// Issue 27 finding 6 (same-host.md, "Names another user can take"): another
// local user plants, under a GID's name, a perfect forgery — a node segment of
// this very process, probe word and all, so that cross-memory attach to the pid
// it names would succeed — owned by that user and open to all (0666, so only
// the owner check stands). The GID's own process can no longer publish there
// (it is pushed to the wire, and says why), and a peer never uses the forgery:
// no peer, nothing read from or written through it.
TEST_F(NodeSegmentTest, AForgeryAnotherUserPlantedTakesTheNameButNothingGoesThroughIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to plant a file as another user (CI runs as root)";
  auto forged = create({gid(7)});
  ASSERT_NE(forged, nullptr);
  const std::string name = node_name(gid(7), dir_);
  const passwd* nobody = getpwnam("nobody");
  ASSERT_EQ(chown(name.c_str(), nobody != nullptr ? nobody->pw_uid : 65534, 0), 0);
  ASSERT_EQ(chmod(name.c_str(), 0666), 0);
  // FNV-1a of the whole file (a peer that joined or reported a fault would have
  // written a slot of it).
  auto bytes_of = [&name] {
    std::ifstream in(name, std::ios::binary);
    std::vector<char> chunk(1 << 20);
    uint64_t hash = 1469598103934665603ull;
    while (in.read(chunk.data(), std::streamsize(chunk.size())) || in.gcount() > 0) {
      for (std::streamsize i = 0; i < in.gcount(); ++i)
        hash = (hash ^ uint8_t(chunk[size_t(i)])) * 1099511628211ull;
    }
    return hash;
  };
  const uint64_t before = bytes_of();

  std::string why;
  EXPECT_EQ(NodeSegment::create(std::vector<Gid>{gid(7)}, why, dir_), nullptr);
  EXPECT_NE(why.find("File exists (a file of another user, uid "), std::string::npos) << why;
  why.clear();
  EXPECT_EQ(Host::open(std::vector<Gid>{gid(7)}, why, dir_), nullptr) << "it took the name";

  auto host = Host::open(std::vector<Gid>{gid(8)}, why, dir_);
  ASSERT_NE(host, nullptr) << why;
  EXPECT_EQ(host->peer(gid(7), 2), nullptr) << "a peer believed another user's file";
  EXPECT_EQ(bytes_of(), before) << "something was written through it";
  EXPECT_TRUE(std::filesystem::exists(name)) << "another user's file is never removed";
}

// On an address its processes share (docs/decisions/host-rnic.md) one GID names
// several node segments: each is named by its QPN blocks as well, and a QPN's
// block finds its process. A process with several blocks is one peer.
TEST_F(NodeSegmentTest, ProcessesOfASharedAddressAreFoundByTheirQpnBlocks) {
  std::string why;
  const std::vector<Gid> shared{gid(9)};
  auto first = Host::open(shared, why, dir_, std::vector<uint32_t>{3});
  ASSERT_NE(first, nullptr) << why;
  auto second = Host::open(shared, why, dir_, std::vector<uint32_t>{5});
  ASSERT_NE(second, nullptr) << "a second process on the address: " << why;
  auto other = Host::open(std::vector<Gid>{gid(10)}, why, dir_);
  ASSERT_NE(other, nullptr) << why;
  EXPECT_FALSE(std::filesystem::exists(node_name(gid(9), dir_))) << "the GID alone names nobody";

  auto reaches = [](const std::shared_ptr<Peer>& peer, Host& host) {
    return peer != nullptr && peer->node->probe_addr() == host.node().header().probe_addr;
  };
  const auto in_first = other->peer(gid(9), wire::first_qpn_of_block(3) + 7);
  EXPECT_TRUE(reaches(in_first, *first));
  EXPECT_TRUE(reaches(other->peer(gid(9), wire::first_qpn_of_block(5)), *second));
  EXPECT_EQ(other->peer(gid(9), wire::first_qpn_of_block(4)), nullptr) << "nobody holds block 4";

  EXPECT_EQ(first->node().add_block(4).size(), 1u);
  EXPECT_EQ(other->peer(gid(9), wire::first_qpn_of_block(4) + 1), in_first)
      << "one process, one peer, whichever block found it";
  first.reset();
  EXPECT_FALSE(std::filesystem::exists(node_name(gid(9), dir_, 4))) << "its names left with it";
  EXPECT_EQ(other->peer(gid(9), wire::first_qpn_of_block(3)), nullptr);
  EXPECT_TRUE(reaches(other->peer(gid(9), wire::first_qpn_of_block(5) + 2), *second));
}

}  // namespace
}  // namespace softrdma::samehost
