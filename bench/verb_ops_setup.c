/* bench/verb_ops: one end of the RC connection, for the measuring process and its
 * peer alike (verb_ops.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "verb_ops.h"

_Noreturn void die(const char* what) {
  fprintf(stderr, "verb_ops[%d]: %s failed (%s)\n", (int)getpid(), what, strerror(errno));
  exit(1);
}

void end_open(struct End* end) {
  memset(end, 0, sizeof *end);
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (list == NULL || n < 1) die("ibv_get_device_list");
  end->ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (end->ctx == NULL) die("ibv_open_device");
  if ((end->pd = ibv_alloc_pd(end->ctx)) == NULL) die("ibv_alloc_pd");
  if ((end->channel = ibv_create_comp_channel(end->ctx)) == NULL) die("ibv_create_comp_channel");
  end->cq = ibv_create_cq(end->ctx, kCqDepth, NULL, end->channel, 0);
  if (end->cq == NULL) die("ibv_create_cq");
  struct ibv_qp_init_attr init = {
      .send_cq = end->cq,
      .recv_cq = end->cq,
      .cap = {.max_send_wr = kSendDepth, .max_recv_wr = kRecvDepth, .max_send_sge = 1,
              .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
  };
  if ((end->qp = ibv_create_qp(end->pd, &init)) == NULL) die("ibv_create_qp");
  /* Private anonymous pages, as perftest's: registered, they move onto the memory
   * file that same-host peers map (docs/decisions/same-host.md, "Shared pages"). */
  end->buf = mmap(NULL, kBufferBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (end->buf == MAP_FAILED) die("mmap");
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if ((end->mr = ibv_reg_mr(end->pd, end->buf, kBufferBytes, access)) == NULL) die("ibv_reg_mr");
}

void end_close(struct End* end) {
  if (ibv_destroy_qp(end->qp) != 0) die("ibv_destroy_qp");
  if (ibv_dereg_mr(end->mr) != 0) die("ibv_dereg_mr");
  if (ibv_destroy_cq(end->cq) != 0) die("ibv_destroy_cq");
  if (ibv_destroy_comp_channel(end->channel) != 0) die("ibv_destroy_comp_channel");
  if (ibv_dealloc_pd(end->pd) != 0) die("ibv_dealloc_pd");
  if (ibv_close_device(end->ctx) != 0) die("ibv_close_device");
  munmap(end->buf, kBufferBytes);
}

/* INIT, RTR, RTS with the attributes `man ibv_modify_qp` requires for RC. */
static void to_rts(struct ibv_qp* qp, const struct Endpoint* remote) {
  struct ibv_qp_attr attr = {
      .qp_state = IBV_QPS_INIT,
      .port_num = 1,
      .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
  };
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
    die("ibv_modify_qp INIT");
  attr = (struct ibv_qp_attr){
      .qp_state = IBV_QPS_RTR,
      .path_mtu = IBV_MTU_1024,
      .dest_qp_num = remote->qpn,
      .rq_psn = 1000,
      .max_dest_rd_atomic = 1,
      .min_rnr_timer = 1,
      .ah_attr = {.is_global = 1,
                  .grh = {.dgid = remote->gid, .sgid_index = 1, .hop_limit = 64},
                  .port_num = 1},
  };
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    die("ibv_modify_qp RTR");
  attr = (struct ibv_qp_attr){
      .qp_state = IBV_QPS_RTS,
      .sq_psn = 1000,
      .timeout = 14,
      .retry_cnt = 7,
      .rnr_retry = 7,
      .max_rd_atomic = 1,
  };
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    die("ibv_modify_qp RTS");
}

struct Endpoint end_connect(struct End* end, int fd) {
  struct Endpoint mine = {.qpn = end->qp->qp_num, .rkey = end->mr->rkey,
                          .addr = (uint64_t)(uintptr_t)end->buf};
  /* GID index 1: the IPv4-mapped entry (Soft-RoCE's convention, DESIGN.md §6). */
  if (ibv_query_gid(end->ctx, 1, 1, &mine.gid) != 0) die("ibv_query_gid");
  struct Endpoint other;
  if (write(fd, &mine, sizeof mine) != (ssize_t)sizeof mine) die("write endpoint");
  if (read(fd, &other, sizeof other) != (ssize_t)sizeof other) die("read endpoint");
  to_rts(end->qp, &other);
  return other;
}

int post_one(struct ibv_qp* qp, enum ibv_wr_opcode opcode, struct ibv_sge* sge,
             const struct Endpoint* remote) {
  struct ibv_send_wr wr = {
      .sg_list = sge,
      .num_sge = 1,
      .opcode = opcode,
      .send_flags = IBV_SEND_SIGNALED,
  };
  if (opcode == IBV_WR_RDMA_WRITE) {
    wr.wr.rdma.remote_addr = remote->addr;
    wr.wr.rdma.rkey = remote->rkey;
  }
  struct ibv_send_wr* bad = NULL;
  return ibv_post_send(qp, &wr, &bad);
}

int post_recv_one(struct End* end) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)end->buf, kMessageBytes, end->mr->lkey};
  struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1};
  struct ibv_recv_wr* bad = NULL;
  return ibv_post_recv(end->qp, &wr, &bad);
}

struct ibv_wc wait_one(struct ibv_cq* cq) {
  struct ibv_wc wc;
  int n;
  while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
  }
  if (n < 0) die("ibv_poll_cq");
  if (wc.status != IBV_WC_SUCCESS) {
    fprintf(stderr, "verb_ops: completion %s\n", ibv_wc_status_str(wc.status));
    exit(1);
  }
  return wc;
}

void send_message(int fd, uint32_t command, uint32_t count) {
  const struct Message m = {command, count};
  if (write(fd, &m, sizeof m) != (ssize_t)sizeof m) die("write message");
}

struct Message receive_message(int fd) {
  struct Message m;
  if (read(fd, &m, sizeof m) != (ssize_t)sizeof m) die("read message");
  return m;
}
