// The functions applications reach through pointers rather than by symbol
// (abi/README.md §3): ibv_context::ops for the inline fast path, verbs_context
// slots for the inline extended API. device.cc installs them in each context.
#pragma once

#include <infiniband/verbs.h>

namespace softrdma::verbs {

// ibv_context::ops (cq.cc, qp.cc).
int op_poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int op_req_notify_cq(ibv_cq* cq, int solicited_only);
int op_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int op_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

// verbs_context slots (query.cc, qp.cc, cq.cc).
int op_query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* attr,
                  size_t attr_len);
int op_query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input,
                       ibv_device_attr_ex* attr, size_t attr_size);
ibv_qp* op_create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr);
ibv_cq_ex* op_create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr);
int op_query_rt_values(ibv_context* context, ibv_values_ex* values);

// SRQs and XRC domains (srq.cc): ibv_context::ops and verbs_context slots.
int op_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
ibv_srq* op_create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr);
int op_get_srq_num(ibv_srq* srq, uint32_t* srq_num);
int op_post_srq_ops(ibv_srq* srq, ibv_ops_wr* op, ibv_ops_wr** bad_op);
ibv_xrcd* op_open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr);
int op_close_xrcd(ibv_xrcd* xrcd);
// Memory windows (mw.cc), ibv_context::ops.
ibv_mw* op_alloc_mw(ibv_pd* pd, ibv_mw_type type);
int op_dealloc_mw(ibv_mw* mw);
int op_bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);
// Thread and parent domains (domains.cc).
ibv_td* op_alloc_td(ibv_context* context, ibv_td_init_attr* init_attr);
int op_dealloc_td(ibv_td* td);
ibv_pd* op_alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr);
struct Pd;
int dealloc_parent_domain(Pd* parent);
// Device memory (dm.cc).
ibv_dm* op_alloc_dm(ibv_context* context, ibv_alloc_dm_attr* attr);
int op_free_dm(ibv_dm* dm);
ibv_mr* op_reg_dm_mr(ibv_pd* pd, ibv_dm* dm, uint64_t dm_offset, size_t length,
                     unsigned int access);
// Memory (pd_mr.cc).
int op_advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
                 uint32_t num_sge);

// Installs the ibv_qp_ex wr_* pointers of an extended QP (qp_ex.cc).
void install_wr_ops(ibv_qp_ex& qpx);
// A poll found nothing and did nothing: gives the core away (sched_yield), at
// once when `at_once` (OpenDevice::idle_poll_yields_at_once), else after enough such
// polls in a row on this thread, now and then (cq.cc).
void after_idle_poll(bool at_once);
void after_busy_poll();

// Installs the ibv_cq_ex iterator and the accessors of the fields in `wc_flags`
// (cq_ex.cc).
void install_cq_ex_ops(ibv_cq_ex& ex, uint64_t wc_flags);

}  // namespace softrdma::verbs
