// What the same-host tests between processes share (same_host_test.cc,
// same_host_senders_test.cc): an endpoint to exchange, one process's verbs
// objects, its own engine counters as `softrdma status` shows them, and sender
// processes forked with a socket each.
#pragma once

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {

// One end of a connection between two processes: what the other needs to know.
struct Endpoint {
  uint32_t qpn;
  ibv_gid gid;
  uint64_t addr;
  uint32_t rkey;
};

struct Ends {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  // Page-aligned, as perftest's: its pages are shared with the peer, whose
  // WRITEs into it are stores (samehost/shared_pages.h).
  std::span<uint8_t> buf = map_buffer(1 << 16);

  Ends() = default;
  Ends(const Ends&) = delete;
  Ends& operator=(const Ends&) = delete;
  ~Ends() {
    if (qp != nullptr) ibv_destroy_qp(qp);
    if (mr != nullptr) ibv_dereg_mr(mr);
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
    munmap(buf.data(), buf.size());
  }
  static std::span<uint8_t> map_buffer(size_t length) {
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    return {static_cast<uint8_t*>(p), length};
  }

  bool open() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr || n < 1) return false;
    ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    if (ctx == nullptr || (pd = ibv_alloc_pd(ctx)) == nullptr) return false;
    if ((cq = ibv_create_cq(ctx, 256, nullptr, nullptr, 0)) == nullptr) return false;
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = ibv_qp_cap{64, 16, 1, 1, 0};
    qp = ibv_create_qp(pd, &init);
    mr = ibv_reg_mr(pd, buf.data(), buf.size(), kAllAccess);
    return qp != nullptr && mr != nullptr;
  }
  Endpoint self() const {
    Endpoint e{qp->qp_num, {}, uint64_t(uintptr_t(buf.data())), mr->rkey};
    ibv_query_gid(ctx, 1, 1, &e.gid);
    return e;
  }
};

// This process's engine counter `name`, as `softrdma status` shows it ("  engine.NAME
// VALUE" under "process PID ..."); UINT64_MAX when absent.
inline uint64_t own_engine_counter(const std::string& name) {
  std::string out;
  if (FILE* p = popen(SOFTRDMA_TOOL " status 2>&1", "r")) {
    char buffer[4096];
    while (size_t n = fread(buffer, 1, sizeof buffer, p)) out.append(buffer, n);
    pclose(p);
  }
  const size_t block = out.find("process " + std::to_string(getpid()) + " ");
  if (block == std::string::npos) return UINT64_MAX;
  const size_t next = out.find("\nprocess ", block);
  const size_t at = out.find("engine." + name + " ", block);
  if (at == std::string::npos || at > next) return UINT64_MAX;
  return std::strtoull(out.c_str() + at + name.size() + 8, nullptr, 10);
}

// Exchanges endpoints over `fd` and connects `ends` to the other side.
inline bool connect_over(int fd, Ends& ends, Endpoint& other) {
  const Endpoint mine = ends.self();
  if (write(fd, &mine, sizeof mine) != ssize_t(sizeof mine)) return false;
  if (read(fd, &other, sizeof other) != ssize_t(sizeof other)) return false;
  Pair::connect(ends.qp, other.qpn, other.gid, 1);
  return true;
}

// Two sender processes, `body(fd, k)` each, each with a socket to this one.
inline bool fork_senders(int (*body)(int, uint32_t), int (&fds)[2], pid_t (&senders)[2]) {
  for (uint32_t k = 0; k < 2; ++k) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return false;
    senders[k] = fork();
    if (senders[k] == 0) {
      close(sv[0]);
      _exit(body(sv[1], k));
    }
    close(sv[1]);
    fds[k] = sv[0];
  }
  return true;
}

// Tells each sender it may go (it waits for the receiver's checks), and checks
// that it exited with 0.
inline void release_senders(int (&fds)[2], pid_t (&senders)[2]) {
  for (uint32_t k = 0; k < 2; ++k) {
    char done = 1;
    EXPECT_EQ(write(fds[k], &done, 1), 1);
    int status = 0;
    ASSERT_EQ(waitpid(senders[k], &status, 0), senders[k]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "sender " << k << ": " << status;
    close(fds[k]);
  }
}

}  // namespace softrdma::verbs::testing
