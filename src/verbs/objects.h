// The verbs objects softrdma's libibverbs.so.1 hands to applications
// (docs/decisions/verbs-abi.md). Each wraps the public rdma-core struct, which
// applications read directly (abi/README.md §8), around a pointer to the engine's
// object; the exported functions downcast with to_*() as rdma-core's providers do
// (to_mqp(), to_rxe_qp() ...). The public struct is the first member, so the
// pointer the application holds is the wrapper's own address, except for the
// context, whose ibv_context must be the last member of a verbs_context.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <new>
#include <vector>

#include "engine/cq.h"
#include "engine/device.h"
#include "engine/mr.h"
#include "engine/pd.h"
#include "engine/qp.h"
#include "runtime/open_device.h"

// Every function the library exports: C linkage, default visibility (the rest of
// the library is hidden; libibverbs.map picks the version node).
#define SOFTRDMA_EXPORT extern "C" __attribute__((visibility("default")))

namespace softrdma::verbs {

struct Context {
  runtime::OpenDevice* node = nullptr;  // shared by the process's contexts (process.h)
  engine::Device* device = nullptr;
  uint64_t generation = 0;        // fork generation that opened it (process.h)
  bool inline_progress = false;   // SOFTRDMA_PROGRESS=inline

  // Async events routed to this context, waiting for ibv_get_async_event; one
  // eventfd unit (EFD_SEMAPHORE) per queued event makes async_fd readable.
  std::mutex events_mutex;
  std::deque<ibv_async_event> events;
  // softrdma_qp_error_fd (async.cc): RC QPs of this context that entered Error,
  // for softrdma's librdmacm; the eventfd is made on first ask (-1 until then).
  // Both under events_mutex.
  int qp_error_fd = -1;
  std::deque<uint32_t> qp_errors;

  // Last: rdma-core finds the verbs_context slots by offset back from the
  // ibv_context (verbs_get_ctx()), and the ibv_context is its last member.
  verbs_context vctx{};

  ibv_context* ibv() { return &vctx.context; }
};

// container_of(ibv_context*): Context is not standard-layout (it holds a mutex),
// where offsetof is "conditionally supported"; GCC and Clang compute it as for
// any class without virtual bases, which is all this needs.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
inline Context* to_context(ibv_context* c) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(c) -
                                    offsetof(Context, vctx) - offsetof(verbs_context, context));
}
#pragma GCC diagnostic pop

// ibv_alloc_td(3): a thread domain. softrdma's objects lock the same way with or
// without one (docs/decisions/parent-domains.md); it is counted, so that it is not
// deallocated under a parent domain.
struct Td {
  ibv_td ibv;
  std::atomic<uint32_t> users{0};
};
inline Td* to_td(ibv_td* t) { return reinterpret_cast<Td*>(t); }

struct Pd {
  ibv_pd ibv;
  engine::Pd* pd;  // a parent domain: its protection domain's engine PD
  // ibv_alloc_parent_domain(3): "completely interchangeable with the struct ibv_pd
  // used to create it". Null for a protection domain.
  Pd* protection = nullptr;
  Td* td = nullptr;
  void* (*alloc)(ibv_pd*, void*, size_t, size_t, uint64_t) = nullptr;
  void (*free)(ibv_pd*, void*, void*, uint64_t) = nullptr;
  void* pd_context = nullptr;
  std::atomic<uint32_t> users{0};  // QPs and extended CQs made with a parent domain
};
inline Pd* to_pd(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }

// ibv_alloc_dm(3): device memory, host memory the device owns (dm.cc).
struct Dm {
  ibv_dm ibv;
  uint8_t* memory = nullptr;
  size_t length = 0;
  size_t reserved = 0;              // bytes charged to the device's max_dm_size
  // Counted on the allocated DM, whichever handle they came through: MRs
  // registered on the memory and handles imported on it (ibv_import_dm(3)).
  // ibv_free_dm is EBUSY while either is non-zero.
  std::atomic<uint32_t> mrs{0};
  std::atomic<uint32_t> imports{0};
  Dm* origin = nullptr;  // an imported handle: the DM allocated by ibv_alloc_dm
  Dm& owner() { return origin != nullptr ? *origin : *this; }
};
inline Dm* to_dm(ibv_dm* d) { return reinterpret_cast<Dm*>(d); }

struct Mr {
  ibv_mr ibv;  // lkey == rkey == the engine's random key
  engine::Mr* mr;
  Dm* dm = nullptr;  // ibv_reg_dm_mr(3)
};
inline Mr* to_mr(ibv_mr* m) { return reinterpret_cast<Mr*>(m); }

struct Cq;

// ibv_create_comp_channel(3): a pollable fd and the CQs whose notification fired,
// in order, until ibv_get_cq_event takes them.
struct CompChannel {
  ibv_comp_channel ibv;  // ibv.fd: eventfd, one EFD_SEMAPHORE unit per queued event
  std::mutex mutex;
  std::deque<Cq*> pending;
};
inline CompChannel* to_channel(ibv_comp_channel* c) { return reinterpret_cast<CompChannel*>(c); }

// The state of an extended CQ's polling batch, ibv_start_poll(3) to ibv_end_poll
// (cq_ex.cc).
struct CqPollBatch {
  uint64_t wc_flags = 0;         // IBV_WC_EX_WITH_* asked at creation
  bool single_threaded = false;  // IBV_CREATE_CQ_ATTR_SINGLE_THREADED: no lock
  // Held from a successful start_poll to end_poll, as rdma-core's providers hold
  // their CQ lock: the current completion is one per CQ, so two threads polling
  // one CQ take turns. Never taken by the engine, which pushes under the engine
  // CQ's own lock: a batch may post (and so run the engine) without deadlock.
  std::mutex lock;
  bool open = false;                // between a successful start_poll and end_poll
  engine::Completion current{};     // what the read_* accessors read
};

struct Cq {
  // ibv_cq_ex begins with the fields of ibv_cq (ibv_cq_ex_to_cq() is a cast): a CQ
  // made by ibv_create_cq_ex is used through both, a plain one only as `ibv`
  // (rdma-core's verbs_cq is the same union).
  union {
    ibv_cq ibv;
    ibv_cq_ex ex;
  };
  engine::Cq* engine_cq;  // the software RNIC's CQ behind it
  runtime::OpenDevice* node;
  Context* ctx;
  CompChannel* channel;  // or null
  bool inline_progress;
  // Events handed to the application, for ibv_destroy_cq to wait until it has
  // acknowledged as many (ibv_get_cq_event(3)). Guarded by ibv.mutex.
  uint32_t comp_events_delivered = 0;
  uint32_t async_events_delivered = 0;
  std::unique_ptr<CqPollBatch> batch;  // CQs made by ibv_create_cq_ex
  Pd* parent_domain = nullptr;         // ibv_create_cq_ex's, if one was given
};
inline Cq* to_cq(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
inline Cq* to_cq(ibv_cq_ex* c) { return reinterpret_cast<Cq*>(c); }

// ibv_create_srq(3) / ibv_create_srq_ex(3).
struct Srq {
  ibv_srq ibv;
  engine::Srq* srq;
  Context* ctx;
  // Async events handed out (ibv_destroy_srq waits for their acks). Guarded by
  // ibv.mutex.
  uint32_t async_events_delivered = 0;
};
inline Srq* to_srq(ibv_srq* s) { return reinterpret_cast<Srq*>(s); }

// ibv_open_xrcd(3).
struct Xrcd {
  ibv_xrcd ibv;
  engine::Xrcd* xrcd;
};
inline Xrcd* to_xrcd(ibv_xrcd* x) { return reinterpret_cast<Xrcd*>(x); }

// State of an ibv_wr_start() ... ibv_wr_complete() batch (qp_ex.cc).
struct WrBatch {
  struct Entry {
    ibv_send_wr wr{};
    std::vector<ibv_sge> sges;
    std::vector<uint8_t> inline_data;
  };
  std::vector<Entry> entries;  // reused across batches: capacity is kept
  size_t used = 0;
  int error = 0;  // the first building error, returned by wr_complete
  // Held from ibv_wr_start to ibv_wr_complete/abort, as rdma-core's providers hold
  // the SQ lock: two threads building on one QP take turns instead of mixing WRs.
  std::mutex lock;
  bool open = false;  // between wr_start and wr_complete/abort (under `lock`)
};

struct Qp {
  ibv_qp_ex ex;  // ex.qp_base is the ibv_qp applications see
  engine::Qp* engine_qp;  // the software RNIC's QP behind it
  Context* ctx;
  runtime::OpenDevice* node;
  std::unique_ptr<WrBatch> batch;  // set when created with send_ops_flags
  // Its queues' memory when made with a parent domain that has allocators; outlives
  // the engine's QP (destroyed first).
  std::unique_ptr<std::pmr::memory_resource> memory;
  // Async events handed out for this QP (ibv_destroy_qp waits for their acks).
  // Guarded by ex.qp_base.mutex.
  uint32_t async_events_delivered = 0;
  // The parent domain it was made with, which cannot be deallocated meanwhile
  // (EBUSY). A plain PD is not held: an imported one may be unimported first, as
  // with rdma-core, so a QP never reads its `pd` after creation.
  Pd* parent_domain = nullptr;
  // The application (or librdmacm) moved it to Error itself: that is not a failed
  // connection, and softrdma_qp_error_fd does not report it. Cleared by RESET.
  std::atomic<bool> error_requested{false};

  ibv_qp* ibv() { return &ex.qp_base; }
};
inline Qp* to_qp(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }
inline Qp* to_qp(ibv_qp_ex* q) { return reinterpret_cast<Qp*>(q); }

// The one way out of an exported function: exceptions (only std::bad_alloc can
// come from the engine) never cross the C ABI (DESIGN.md §1).
//
// The errno for the exception being handled; call only inside a catch block.
inline int errno_of_current_exception() noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  } catch (...) {
    return EIO;
  }
}

// guard_ptr: create calls; NULL with errno on failure.
template <typename Fn>
auto guard_ptr(Fn&& fn) noexcept -> decltype(fn()) {
  try {
    return fn();
  } catch (...) {
    errno = errno_of_current_exception();
    return nullptr;
  }
}

// guard_errno: calls that return an errno value (0 on success).
template <typename Fn>
int guard_errno(Fn&& fn) noexcept {
  try {
    return fn();
  } catch (...) {
    return errno_of_current_exception();
  }
}

// guard_minus1: calls that return -1 and set errno on failure.
template <typename Fn>
int guard_minus1(Fn&& fn) noexcept {
  try {
    return fn();
  } catch (...) {
    errno = errno_of_current_exception();
    return -1;
  }
}

// Sets errno and returns null: the create-call convention (DESIGN.md §7).
inline std::nullptr_t fail(int err) {
  errno = err;
  return nullptr;
}

}  // namespace softrdma::verbs
