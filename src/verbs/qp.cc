// Queue pairs (ibv_create_qp(3), ibv_create_qp_ex(3), ibv_modify_qp(3),
// ibv_query_qp(3), ibv_post_send(3), ibv_post_recv(3)). RC, UC and UD exist in the
// engine so far: other types are EOPNOTSUPP.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>

#include "verbs/attributes.h"
#include "verbs/domains.h"
#include "verbs/objects.h"
#include "verbs/ops.h"
#include "verbs/process.h"
#include "wire/iwarp/handoff.h"

using namespace softrdma::verbs;

namespace {


// What the ibv_wr_* API can build (qp_ex.cc).
constexpr uint64_t kSupportedSendOps =
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
    IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
    IBV_QP_EX_WITH_SEND_WITH_INV;
// IBA Table 39: of those, UC has SEND and RDMA WRITE, UD has SEND; UC also the send
// queue's memory operations (ibv_bind_mw(3): "UC, RC or XRC_SEND").
constexpr uint64_t kUcSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
constexpr uint64_t kUdSendOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

uint64_t send_ops_of(ibv_qp_type type) {
  switch (type) {
    case IBV_QPT_UC: return kUcSendOps;
    case IBV_QPT_UD: return kUdSendOps;
    case IBV_QPT_XRC_RECV: return 0;  // no send queue
    default: return kSupportedSendOps;
  }
}

// The engine objects an ibv_qp_init_attr_ex names, each checked to belong to
// `context` (EINVAL otherwise, ibv_create_qp(3)).
int resolve_objects(ibv_context* context, const ibv_qp_init_attr_ex& attr,
                    softrdma::engine::QpInit& init) {
  auto foreign = [&](auto* object) { return object != nullptr && object->context != context; };
  if (foreign(attr.send_cq) || foreign(attr.recv_cq) || foreign(attr.srq)) return EINVAL;
  if ((attr.comp_mask & IBV_QP_INIT_ATTR_XRCD) && foreign(attr.xrcd)) return EINVAL;
  init.type = attr.qp_type;
  // An XRC receive QP has no CQs; rdma-core's providers ignore any given.
  if (attr.qp_type != IBV_QPT_XRC_RECV) {
    if (attr.send_cq != nullptr) init.send_cq = to_cq(attr.send_cq)->engine_cq;
    if (attr.recv_cq != nullptr && attr.qp_type != IBV_QPT_XRC_SEND)
      init.recv_cq = to_cq(attr.recv_cq)->engine_cq;
    if (attr.srq != nullptr) init.srq = to_srq(attr.srq)->srq;
  }
  if ((attr.comp_mask & IBV_QP_INIT_ATTR_XRCD) && attr.xrcd != nullptr)
    init.xrcd = to_xrcd(attr.xrcd)->xrcd;
  init.cap = attr.cap;
  init.sq_sig_all = attr.sq_sig_all != 0;
  init.block_self_multicast_loopback = (attr.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
                                       (attr.create_flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB);
  return 0;
}

// ibv_create_qp(3) / ibv_create_qp_ex(3): EINVAL for a missing or foreign object
// or caps beyond the device's; EOPNOTSUPP for a type the engine lacks.
// attr.cap is updated to what the QP really has. `pd` is null for an XRC
// receive QP, which lives in its XRC domain.
Qp* create_qp(ibv_context* context, ibv_pd* pd, ibv_qp_init_attr_ex& attr, int& err,
              bool gsi = false) {
  if (!live(context)) return err = EIO, nullptr;
  if (pd != nullptr && pd->context != context) return err = EINVAL, nullptr;
  Context* ctx = to_context(context);
  softrdma::engine::QpInit init;
  if ((err = resolve_objects(context, attr, init)) != 0) return nullptr;
  init.gsi = gsi;
  auto qp = std::make_unique<Qp>();
  // A PD or a parent domain (domains.cc); none for an XRC receive QP.
  Pd* domain = pd != nullptr ? to_pd(pd) : nullptr;
  if (domain != nullptr) {
    qp->memory = parent_domain_memory(*domain, kResourceQpQueues);
    init.memory = qp->memory.get();
  }
  qp->engine_qp = ctx->device->create_qp(domain != nullptr ? domain->pd : nullptr, init, err);
  if (qp->engine_qp == nullptr) return nullptr;
  if (domain != nullptr && domain->protection != nullptr) {
    qp->parent_domain = domain;
    domain->users.fetch_add(1);
  }
  attr.cap = init.cap;
  qp->ctx = ctx;
  qp->node = ctx->node;
  ibv_qp& q = qp->ex.qp_base;
  q.context = context;
  q.qp_context = attr.qp_context;
  q.pd = pd;
  q.send_cq = init.send_cq != nullptr ? attr.send_cq : nullptr;
  q.recv_cq = init.recv_cq != nullptr ? attr.recv_cq : nullptr;
  q.srq = init.srq != nullptr ? attr.srq : nullptr;
  q.handle = qp->engine_qp->qpn();
  q.qp_num = qp->engine_qp->qpn();
  // RESET, as libibverbs' ibv_cmd_create_qp sets it for every device; an iWARP
  // QP is already INIT in the engine, which ibv_query_qp reports (as with siw).
  q.state = IBV_QPS_RESET;
  q.qp_type = attr.qp_type;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  Process::get().add_qp(qp.get());
  return qp.release();
}

// The extensions of ibv_create_qp_ex(3) that a QP here can honour.
int check_qp_ex(const ibv_qp_init_attr_ex& attr) {
  constexpr uint32_t kKnown = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                              IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                              IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
  // IBA A14: an XRC receive QP lives in an XRC domain, every other QP in a PD.
  if (attr.qp_type == IBV_QPT_XRC_RECV ? !(attr.comp_mask & IBV_QP_INIT_ATTR_XRCD)
                                       : !(attr.comp_mask & IBV_QP_INIT_ATTR_PD))
    return EINVAL;
  if (attr.comp_mask & ~kKnown) return EOPNOTSUPP;
  // Of the creation flags, only blocking a UD QP's own multicast loopback
  // means something here (mckey -l); the others are a NIC's offloads.
  if ((attr.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr.create_flags != 0 &&
      (attr.create_flags != IBV_QP_CREATE_BLOCK_SELF_MCAST_LB || attr.qp_type != IBV_QPT_UD))
    return EOPNOTSUPP;
  if ((attr.comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) && attr.max_tso_header != 0)
    return EOPNOTSUPP;
  if ((attr.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
      (attr.send_ops_flags & ~send_ops_of(attr.qp_type)) != 0)
    return EOPNOTSUPP;
  return 0;
}

// ibv_destroy_qp(3) waits until every async event handed out for the QP is
// acknowledged (ibv_get_async_event(3)).
void wait_for_acks(Qp* qp) {
  ibv_qp* q = qp->ibv();
  pthread_mutex_lock(&q->mutex);
  while (q->events_completed != qp->async_events_delivered) pthread_cond_wait(&q->cond, &q->mutex);
  pthread_mutex_unlock(&q->mutex);
}

}  // namespace

namespace softrdma::verbs {

ibv_qp* op_create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  return guard_ptr([&]() -> ibv_qp* {
    if (attr == nullptr) return fail(EINVAL);
    if (int err = check_qp_ex(*attr)) return fail(err);
    ibv_pd* pd = attr->qp_type == IBV_QPT_XRC_RECV ? nullptr : attr->pd;
    if (attr->qp_type != IBV_QPT_XRC_RECV && pd == nullptr) return fail(EINVAL);
    int err = 0;
    Qp* qp = create_qp(context, pd, *attr, err);
    if (qp == nullptr) return fail(err);
    if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
      qp->batch = std::make_unique<WrBatch>();
      install_wr_ops(qp->ex);
    }
    return qp->ibv();
  });
}

// ibv_post_send(3) / ibv_post_recv(3): the engine checks state (RESET..RTR:
// EINVAL), SGE count (EINVAL), queue space (ENOMEM); *bad_wr names the first WR
// not posted.
namespace {

// `post(wr, &bad)` is the engine's post_send or post_recv.
template <typename Wr, typename Post>
int post_wrs(Qp* qp, Wr* wr, Wr** bad_wr, Post&& post) {
  const Wr* bad = wr;
  int err = EIO;
  try {
    if (!Process::get().stale(qp->ctx)) err = post(wr, &bad);
  } catch (...) {
    err = ENOMEM;
  }
  if (err != 0 && bad_wr != nullptr) *bad_wr = const_cast<Wr*>(bad);
  return err;
}

}  // namespace

int op_post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp* qp = to_qp(ibqp);
  return post_wrs(qp, wr, bad_wr, [&](const ibv_send_wr* w, const ibv_send_wr** bad) {
    return qp->engine_qp->post_send(w, bad);
  });
}

int op_post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp* qp = to_qp(ibqp);
  return post_wrs(qp, wr, bad_wr, [&](const ibv_recv_wr* w, const ibv_recv_wr** bad) {
    return qp->engine_qp->post_recv(w, bad);
  });
}

}  // namespace softrdma::verbs

namespace {

ibv_qp* create_qp_from_basic_attr(ibv_pd* pd, ibv_qp_init_attr* attr, bool gsi) {
  return guard_ptr([&]() -> ibv_qp* {
    if (attr == nullptr || pd == nullptr) return fail(EINVAL);
    ibv_qp_init_attr_ex ex{};
    ex.qp_context = attr->qp_context;
    ex.send_cq = attr->send_cq;
    ex.recv_cq = attr->recv_cq;
    ex.srq = attr->srq;
    ex.cap = attr->cap;
    ex.qp_type = attr->qp_type;
    ex.sq_sig_all = attr->sq_sig_all;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    int err = 0;
    Qp* qp = create_qp(pd->context, pd, ex, err, gsi);
    if (qp == nullptr) return fail(err);
    attr->cap = ex.cap;
    return qp->ibv();
  });
}

}  // namespace

SOFTRDMA_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  return create_qp_from_basic_attr(pd, attr, false);
}

// softrdma's own: QP1 of the device (a UD QP, EBUSY if the process has one),
// for softrdma's librdmacm, whose CM agent sends and receives Communication
// Manager MADs there as RoCEv2 peers expect (docs/decisions/rdma-cm.md). Not
// part of rdma-core's ABI: exported at node SOFTRDMA_PRIVATE_1.
SOFTRDMA_EXPORT ibv_qp* softrdma_create_gsi_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  return create_qp_from_basic_attr(pd, attr, true);
}

// softrdma's own, for its librdmacm's iWARP connections (wire/iwarp/handoff.h,
// docs/decisions/iwarp.md): the QP (RC, in INIT, of an iWARP device) speaks on
// the TCP connection whose MPA start frames the CM exchanged, and is in RTS, as
// the kernel's iw_cm moves an iWARP QP itself. The descriptor is the device's.
SOFTRDMA_EXPORT int softrdma_iwarp_attach(ibv_qp* ibqp,
                                          const softrdma::wire::iwarp::IwarpHandoff* handoff) {
  return guard_errno([&] {
    if (handoff == nullptr) return EINVAL;
    if (!live(ibqp->context)) {
      ::close(handoff->fd);
      return EIO;
    }
    Qp* qp = to_qp(ibqp);
    if (int err = to_context(ibqp->context)->device->attach_connection(qp->engine_qp, *handoff)) return err;
    ibqp->state = IBV_QPS_RTS;
    return 0;
  });
}

// softrdma's own, for its librdmacm's rsockets (docs/decisions/rsockets.md "A
// peer that dies"): 1 when the QP's connection ended because the peer closed it
// in order (iWARP: the stream's FIN), 0 otherwise (up, lost, or never bound). A
// flushed receive then reads as the end of the stream, not as a reset.
SOFTRDMA_EXPORT int softrdma_qp_closed_by_peer(ibv_qp* ibqp) {
  if (!live(ibqp->context)) return 0;
  return to_qp(ibqp)->engine_qp->closed_by_peer() ? 1 : 0;
}

// ibv_modify_qp(3): the engine applies the state table of IBA 10.3 / the man
// page's required/optional attributes; anything else is EINVAL and changes nothing.
SOFTRDMA_EXPORT int ibv_modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int attr_mask) {
  return guard_errno([&] {
    if (!live(ibqp->context)) return EIO;
    Qp* qp = to_qp(ibqp);
    // Before the engine's change, which is when the observer sees the state.
    const bool to_error = (attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR;
    if (to_error) qp->error_requested.store(true, std::memory_order_relaxed);
    if (int err = qp->engine_qp->modify(*attr, attr_mask)) return err;
    if (attr_mask & IBV_QP_STATE) ibqp->state = attr->qp_state;
    if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET)
      qp->error_requested.store(false, std::memory_order_relaxed);
    return 0;
  });
}

// ibv_query_qp(3); like rdma-core, refreshes qp->state (the engine may have
// moved the QP to ERROR on its own).
SOFTRDMA_EXPORT int ibv_query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int attr_mask,
                                 ibv_qp_init_attr* init_attr) {
  return guard_errno([&] {
    if (!live(ibqp->context)) return EIO;
    if (int err = to_qp(ibqp)->engine_qp->query(*attr, attr_mask, *init_attr)) return err;
    init_attr->qp_context = ibqp->qp_context;
    init_attr->send_cq = ibqp->send_cq;
    init_attr->recv_cq = ibqp->recv_cq;
    init_attr->srq = ibqp->srq;
    ibqp->state = attr->qp_state;
    return 0;
  });
}

namespace {

// softrdma_observe_qp_destroy's observer, or null.
std::atomic<void (*)(ibv_qp*)> qp_destroy_observer{nullptr};

}  // namespace

// SOFTRDMA_PRIVATE_1, for softrdma's librdmacm only: `observer` is called at the
// start of every ibv_destroy_qp(3), before the QP is touched. rdma-core's
// librdmacm moves an id's QP only in the application's own calls; softrdma's
// CM agent moves it from its thread too (a peer's DREQ or exit: QP to Error), so
// it must hear of a QP the application destroys with ibv_destroy_qp(3) instead
// of rdma_destroy_qp(3) while its id stays connected (perftest's control
// connection), and forget it, before it is freed.
SOFTRDMA_EXPORT void softrdma_observe_qp_destroy(void (*observer)(ibv_qp*)) {
  qp_destroy_observer.store(observer, std::memory_order_release);
}

SOFTRDMA_EXPORT int ibv_destroy_qp(ibv_qp* ibqp) {
  return guard_errno([&] {
    if (auto* observer = qp_destroy_observer.load(std::memory_order_acquire)) observer(ibqp);
    Qp* qp = to_qp(ibqp);
    if (live(ibqp->context)) {
      Process::get().remove_qp(qp);
      drop_async_events(*qp->ctx, ibqp);
      wait_for_acks(qp);
      if (int err = qp->ctx->device->destroy_qp(qp->engine_qp)) {
        Process::get().add_qp(qp);
        return err;
      }
    }
    if (qp->parent_domain != nullptr) qp->parent_domain->users.fetch_sub(1);
    pthread_cond_destroy(&ibqp->cond);
    pthread_mutex_destroy(&ibqp->mutex);
    delete qp;
    return 0;
  });
}

// The extended view exists for QPs created with send_ops_flags (as in rdma-core,
// where other QPs answer NULL).
SOFTRDMA_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* ibqp) {
  Qp* qp = to_qp(ibqp);
  return qp->batch ? &qp->ex : nullptr;
}

// ibv_query_qp_data_in_order(3): 0, "not guaranteed". Payload is copied with
// memcpy, whose stores a polling CPU may see in any order within a packet.
SOFTRDMA_EXPORT int ibv_query_qp_data_in_order(ibv_qp* /*qp*/, ibv_wr_opcode /*op*/,
                                               uint32_t /*flags*/) {
  return 0;
}

// Enhanced Connection Establishment (ibv_query_ece(3), ibv_set_ece(3); IBA's
// REQ/REP Vendor ID and options): softrdma offers selective repeat under its own
// vendor ID (docs/decisions/selective-repeat.md). The query answers what the QP
// offers, or once set, what was agreed; set takes the peer's answer, keeping what
// both understand. Another vendor's options mean nothing here: EINVAL, as mlx5
// answers ours (librdmacm then goes on without them). Errors are returned and in
// errno: librdmacm reads errno.
namespace {

int ece_error(int err) {
  errno = err;
  return err;
}

uint32_t offered_ece_options(softrdma::engine::Device& device) {
  if (!device.family().traits().selective_repeat ||
      device.config().selective_repeat == softrdma::engine::SelectiveRepeatMode::kOff)
    return 0;
  return softrdma::engine::kEceSelectiveRepeat | softrdma::engine::kEceWideSack |
         softrdma::engine::kEceAckHold;
}

}  // namespace

SOFTRDMA_EXPORT int ibv_query_ece(ibv_qp* ibqp, ibv_ece* ece) {
  if (ibqp == nullptr || ece == nullptr) return ece_error(EINVAL);
  softrdma::engine::Device& device = *to_context(ibqp->context)->device;
  if (!device.family().traits().selective_repeat) return ece_error(EOPNOTSUPP);
  const softrdma::engine::Qp& qp = *to_qp(ibqp)->engine_qp;
  const uint32_t options = qp.ece_set() ? qp.ece_options() : offered_ece_options(device);
  *ece = ibv_ece{.vendor_id = kVendorId, .options = options, .comp_mask = 0};
  return 0;
}

SOFTRDMA_EXPORT int ibv_set_ece(ibv_qp* ibqp, ibv_ece* ece) {
  if (ibqp == nullptr || ece == nullptr || ece->comp_mask != 0) return ece_error(EINVAL);
  softrdma::engine::Device& device = *to_context(ibqp->context)->device;
  if (!device.family().traits().selective_repeat) return ece_error(EOPNOTSUPP);
  if (ece->vendor_id != kVendorId) return ece_error(EINVAL);
  to_qp(ibqp)->engine_qp->set_ece_options(ece->options & offered_ece_options(device));
  return 0;
}

// ibv_attach_mcast(3) / ibv_detach_mcast(3) (docs/decisions/multicast.md). RoCE
// has no multicast LIDs (IBA A17.4.5.1: the LRH is gone): `lid` is ignored, as
// rxe ignores it; the GID names the group.
namespace {
int change_mcast(ibv_qp* ibqp, const ibv_gid* gid, bool attach) {
  return guard_errno([&] {
    if (ibqp == nullptr || gid == nullptr || !live(ibqp->context)) return EINVAL;
    Qp* qp = to_qp(ibqp);
    softrdma::engine::Gid group;
    std::copy(std::begin(gid->raw), std::end(gid->raw), group.begin());
    softrdma::engine::Device& device = *qp->ctx->device;
    return attach ? device.attach_mcast(qp->engine_qp, group) : device.detach_mcast(qp->engine_qp, group);
  });
}
}  // namespace

SOFTRDMA_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t /*lid*/) {
  return change_mcast(qp, gid, true);
}
SOFTRDMA_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t /*lid*/) {
  return change_mcast(qp, gid, false);
}
