// Shared receive queues and XRC domains (ibv_create_srq(3), ibv_create_srq_ex(3),
// ibv_modify_srq(3), ibv_query_srq(3), ibv_post_srq_recv(3), ibv_get_srq_num(3),
// ibv_open_xrcd(3)); docs/decisions/srq.md.
#include <fcntl.h>
#include <sys/stat.h>

#include <memory>

#include "verbs/objects.h"
#include "verbs/ops.h"
#include "verbs/process.h"

using namespace softrdma::verbs;

namespace {

ibv_srq* create_srq(Context* ctx, ibv_pd* pd, softrdma::engine::SrqInit& init, void* user_context,
                    ibv_srq_attr& reported) {
  int err = 0;
  auto srq = std::make_unique<Srq>();
  srq->srq = ctx->device->create_srq(to_pd(pd)->pd, init, err);
  if (srq->srq == nullptr) return fail(err);
  reported = init.attr;
  srq->ctx = ctx;
  ibv_srq& s = srq->ibv;
  s.context = ctx->ibv();
  s.srq_context = user_context;
  s.pd = pd;
  s.handle = srq->srq->srqn();
  pthread_mutex_init(&s.mutex, nullptr);
  pthread_cond_init(&s.cond, nullptr);
  Process::get().add_srq(srq.get());
  return &srq.release()->ibv;
}

// ibv_destroy_srq(3) waits until every async event handed out for the SRQ is
// acknowledged (ibv_get_async_event(3)).
void wait_for_acks(Srq* srq) {
  pthread_mutex_lock(&srq->ibv.mutex);
  while (srq->ibv.events_completed != srq->async_events_delivered)
    pthread_cond_wait(&srq->ibv.cond, &srq->ibv.mutex);
  pthread_mutex_unlock(&srq->ibv.mutex);
}

// The inode an XRC domain is shared by (ibv_open_xrcd(3)): 0 for an fd of -1.
bool inode_of(const ibv_xrcd_init_attr& attr, uint64_t& inode) {
  inode = 0;
  if (!(attr.comp_mask & IBV_XRCD_INIT_ATTR_FD) || attr.fd == -1) return true;
  struct stat st {};
  if (fstat(attr.fd, &st) != 0) return false;
  inode = uint64_t(st.st_ino) ^ (uint64_t(st.st_dev) << 40);
  return true;
}

}  // namespace

SOFTRDMA_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  return guard_ptr([&]() -> ibv_srq* {
    if (pd == nullptr || attr == nullptr) return fail(EINVAL);
    if (!live(pd->context)) return fail(EIO);
    softrdma::engine::SrqInit init;
    init.attr = attr->attr;
    return create_srq(to_context(pd->context), pd, init, attr->srq_context, attr->attr);
  });
}

namespace softrdma::verbs {

ibv_srq* op_create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  return guard_ptr([&]() -> ibv_srq* {
    constexpr uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                                IBV_SRQ_INIT_ATTR_TM;
    if (attr == nullptr || (attr->comp_mask & ~kKnown) != 0) return fail(EINVAL);
    if (!live(context)) return fail(EIO);
    const uint32_t mask = attr->comp_mask;
    if (!(mask & IBV_SRQ_INIT_ATTR_PD) || attr->pd == nullptr || attr->pd->context != context)
      return fail(EINVAL);
    engine::SrqInit init;
    init.attr = attr->attr;
    init.type = (mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
    // Tag matching (docs/decisions/tag-matching.md): as XRC, a CQ of its own, and
    // the tag list's size and operations (tag_matching.md "TM-SRQ creation").
    if (init.type == IBV_SRQT_TM) {
      if (!(mask & IBV_SRQ_INIT_ATTR_TM) || !(mask & IBV_SRQ_INIT_ATTR_CQ) ||
          attr->cq == nullptr || attr->cq->context != context)
        return fail(EINVAL);
      init.cq = to_cq(attr->cq)->engine_cq;
      init.tm = attr->tm_cap;
    }
    if (init.type == IBV_SRQT_XRC) {
      if (!(mask & IBV_SRQ_INIT_ATTR_XRCD) || !(mask & IBV_SRQ_INIT_ATTR_CQ) ||
          attr->xrcd == nullptr || attr->cq == nullptr || attr->cq->context != context)
        return fail(EINVAL);
      init.xrcd = to_xrcd(attr->xrcd)->xrcd;
      init.cq = to_cq(attr->cq)->engine_cq;
    }
    return create_srq(to_context(context), attr->pd, init, attr->srq_context, attr->attr);
  });
}

int op_post_srq_recv(ibv_srq* ibv, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Srq* srq = to_srq(ibv);
  const ibv_recv_wr* bad = wr;
  int err = EIO;
  try {
    if (live(srq->ctx)) err = srq->srq->post_recv(wr, &bad);
  } catch (...) {
    err = ENOMEM;
  }
  if (err != 0 && bad_wr != nullptr) *bad_wr = const_cast<ibv_recv_wr*>(bad);
  return err;
}

// ibv_post_srq_ops(3): the tag list operations of a TM SRQ (engine/srq_tm.cc);
// EINVAL on any other SRQ, as mlx5 answers.
int op_post_srq_ops(ibv_srq* ibv, ibv_ops_wr* wr, ibv_ops_wr** bad_wr) {
  if (ibv == nullptr) return EINVAL;
  Srq* srq = to_srq(ibv);
  ibv_ops_wr* bad = wr;
  int err = EIO;
  try {
    if (live(srq->ctx)) err = srq->srq->post_ops(wr, &bad);
  } catch (...) {
    err = ENOMEM;
  }
  if (err != 0 && bad_wr != nullptr) *bad_wr = bad;
  return err;
}

int op_get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
  if (srq == nullptr || srq_num == nullptr) return EINVAL;
  *srq_num = to_srq(srq)->srq->srqn();
  return 0;
}

ibv_xrcd* op_open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
  return guard_ptr([&]() -> ibv_xrcd* {
    constexpr uint32_t kKnown = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    if (attr == nullptr || (attr->comp_mask & ~kKnown) != 0) return fail(EINVAL);
    if (!live(context)) return fail(EIO);
    // ibv_open_xrcd(3): only O_CREAT and O_EXCL are meaningful in oflags.
    const int oflags = (attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ? attr->oflags : 0;
    if ((oflags & ~(O_CREAT | O_EXCL)) != 0) return fail(EINVAL);
    uint64_t inode = 0;
    if (!inode_of(*attr, inode)) return fail(EBADF);
    int err = 0;
    auto xrcd = std::make_unique<Xrcd>();
    xrcd->xrcd = to_context(context)->device->open_xrcd(inode, oflags & O_CREAT, err);
    if (xrcd->xrcd == nullptr) return fail(err);
    xrcd->ibv.context = context;
    return &xrcd.release()->ibv;
  });
}

int op_close_xrcd(ibv_xrcd* ibv) {
  return guard_errno([&] {
    if (ibv == nullptr) return EINVAL;
    if (live(ibv->context)) {
      if (int err = to_context(ibv->context)->device->close_xrcd(to_xrcd(ibv)->xrcd)) return err;
    }
    delete to_xrcd(ibv);
    return 0;
  });
}

}  // namespace softrdma::verbs

SOFTRDMA_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  return guard_errno([&] {
    if (srq == nullptr || attr == nullptr) return EINVAL;
    if (!live(srq->context)) return EIO;
    return to_srq(srq)->srq->modify(*attr, mask);
  });
}

SOFTRDMA_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  return guard_errno([&] {
    if (srq == nullptr || attr == nullptr) return EINVAL;
    if (!live(srq->context)) return EIO;
    *attr = to_srq(srq)->srq->query();
    return 0;
  });
}

// EBUSY while a QP is attached (ibv_destroy_srq(3)); the SRQ then stays valid.
SOFTRDMA_EXPORT int ibv_destroy_srq(ibv_srq* ibv) {
  return guard_errno([&] {
    if (ibv == nullptr) return EINVAL;
    Srq* srq = to_srq(ibv);
    if (live(srq->ctx)) {
      if (int err = srq->ctx->device->destroy_srq(srq->srq)) return err;
    }
    Process::get().remove_srq(srq);
    drop_async_events(*srq->ctx, ibv);
    wait_for_acks(srq);
    pthread_cond_destroy(&ibv->cond);
    pthread_mutex_destroy(&ibv->mutex);
    delete srq;
    return 0;
  });
}
