/* verbs_ops: the operations the kernel's stock tools never send, between two
 * libibverbs programs (softrdma's side and the guest's rxe0), checked at the
 * receiver: SEND with immediate data, RDMA WRITE with immediate data (RC),
 * SEND with invalidate of a type-2 memory window (RC, -i), zero-length
 * messages, and a requester PSN that wraps (it starts at 0xfffff8).
 *
 *   verbs_ops -c rc|ud -d DEV -g GID_INDEX -p PORT -s 0,8,3000 [-i]          responder
 *   verbs_ops -c rc|ud -d DEV -g GID_INDEX -p PORT -s 0,8,3000 [-i] ADDRESS  requester
 *
 * Both sides take the same -c, -s and -i. They exchange QP numbers, PSNs and
 * GIDs over TCP (PORT; the responder listens). For each size the requester
 * sends SEND_WITH_IMM, then (RC) RDMA_WRITE_WITH_IMM, then (-i) SEND_WITH_INV of
 * the window the responder bound for that size, one at a time. The responder
 * checks every receive completion: its opcode, length, immediate data or
 * invalidated rkey, and the bytes that landed. Exit 0 when every operation
 * completed and every receive checked out, on both sides.
 * scripts/interop.py builds it on the host (cc -O2 verbs_ops.c -libverbs) and
 * shares it with the guest. */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { kMaxSizes = 12, kSlot = 16384, kRecvSlots = 3 * kMaxSizes, kGrh = 40 };
enum { kWriteArea = kRecvSlots * kSlot, kWindowArea = kWriteArea + kMaxSizes * kSlot };
enum { kBufferBytes = kWindowArea + kMaxSizes * kSlot };
static const uint32_t kQkey = 0x0e0e0e0e;
enum Op { kSendImm, kWriteImm, kSendInv };

struct Endpoint { /* what each side tells the other, in host byte order */
  uint32_t qpn, psn, rkey, windows;
  uint64_t addr;
  uint32_t window_rkey[kMaxSizes];
  uint8_t gid[16];
} __attribute__((packed));

struct Side {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_mr *mr;
  struct ibv_cq *send_cq, *recv_cq;
  struct ibv_qp *qp;
  struct ibv_ah *ah;
  unsigned char *buf;
  enum ibv_mtu mtu;
  int rc, invalidate, gid_index, nsizes, sizes[kMaxSizes];
  unsigned with_inv; /* the flag that marks an invalidation in this device's completions */
};

static void fail(const char *what) {
  perror(what);
  exit(1);
}

static uint8_t pattern(int i) { return (uint8_t)(i * 7 + 1); }
static uint32_t imm_of(int op, int k) { return 0x5e000000u | (uint32_t)(op << 8) | (uint32_t)k; }

static void exchange(int fd, const void *out, void *in, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t r = write(fd, (const char *)out + done, n - done);
    if (r <= 0) fail("side channel write");
    done += (size_t)r;
  }
  for (size_t done = 0; done < n;) {
    ssize_t r = read(fd, (char *)in + done, n - done);
    if (r <= 0) fail("side channel read");
    done += (size_t)r;
  }
}

static int side_channel(const char *address, int port) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  if (address) {
    inet_pton(AF_INET, address, &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) fail("connect");
    return fd;
  }
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 1)) fail("listen");
  int conn = accept(fd, NULL, NULL);
  if (conn < 0) fail("accept");
  close(fd);
  return conn;
}

/* One completion within ten seconds (an emulated guest is slow), or a failed one. */
static struct ibv_wc poll_one(struct ibv_cq *cq) {
  struct ibv_wc wc;
  time_t deadline = time(NULL) + 10;
  int n;
  while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && time(NULL) < deadline) {
  }
  if (n != 1) {
    memset(&wc, 0, sizeof wc);
    wc.status = IBV_WC_GENERAL_ERR;
    fprintf(stderr, "verbs_ops: no completion within 10 s\n");
  }
  return wc;
}

static void open_side(struct Side *s, const char *device) {
  struct ibv_device **list = ibv_get_device_list(NULL);
  for (int i = 0; list && list[i] && !s->ctx; i++) {
    if (strcmp(ibv_get_device_name(list[i]), device) == 0) s->ctx = ibv_open_device(list[i]);
  }
  if (!s->ctx) fail(device);
  /* Linux rxe (6.1, rxe_resp.c) writes the kernel's IB_WC_WITH_INVALIDATE, bit 2,
   * into its user-space completions, where libibverbs' bit 2 is IBV_WC_IP_CSUM_OK:
   * measured, every SEND_WITH_INV completion has wc_flags 0x5. The rkey is right. */
  s->with_inv = strncmp(device, "rxe", 3) == 0 ? 1u << 2 : IBV_WC_WITH_INV;
  struct ibv_port_attr port;
  if (ibv_query_port(s->ctx, 1, &port)) fail("ibv_query_port");
  s->mtu = port.active_mtu;
  s->pd = ibv_alloc_pd(s->ctx);
  s->buf = aligned_alloc(4096, kBufferBytes);
  if (!s->pd || !s->buf) fail("ibv_alloc_pd");
  memset(s->buf, 0, kBufferBytes); /* where receives and WRITEs land: nothing yet */
  for (int i = 0; i < kMaxSizes * kSlot; i++) s->buf[kWindowArea + i] = pattern(i);
  s->mr = ibv_reg_mr(s->pd, s->buf, kBufferBytes,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
  s->send_cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
  s->recv_cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
  struct ibv_qp_init_attr init = {.send_cq = s->send_cq, .recv_cq = s->recv_cq,
                                  .qp_type = s->rc ? IBV_QPT_RC : IBV_QPT_UD,
                                  .cap = {.max_send_wr = 32, .max_recv_wr = kRecvSlots,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
  s->qp = s->mr && s->send_cq && s->recv_cq ? ibv_create_qp(s->pd, &init) : NULL;
  if (!s->qp) fail("ibv_create_qp");
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = kQkey,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
             (s->rc ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY);
  if (ibv_modify_qp(s->qp, &a, mask)) fail("modify_qp INIT");
  for (int i = 0; i < kRecvSlots; i++) {
    struct ibv_sge sge = {(uintptr_t)s->buf + i * kSlot, kSlot, s->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(s->qp, &wr, &bad)) fail("ibv_post_recv");
  }
}

static void connect_qp(struct Side *s, const struct Endpoint *me, const struct Endpoint *peer) {
  struct ibv_ah_attr ah = {.is_global = 1, .port_num = 1,
                           .grh = {.sgid_index = (uint8_t)s->gid_index, .hop_limit = 64}};
  memcpy(ah.grh.dgid.raw, peer->gid, 16);
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = s->mtu, .dest_qp_num = peer->qpn,
                          .rq_psn = peer->psn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
                          .ah_attr = ah};
  int mask = IBV_QP_STATE | (s->rc ? IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                         IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                         IBV_QP_MIN_RNR_TIMER : 0);
  if (ibv_modify_qp(s->qp, &a, mask)) fail("modify_qp RTR");
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = me->psn, .timeout = 14,
                           .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1};
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN | (s->rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                                     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC : 0);
  if (ibv_modify_qp(s->qp, &a, mask)) fail("modify_qp RTS");
  if (!s->rc && !(s->ah = ibv_create_ah(s->pd, &ah))) fail("ibv_create_ah");
}

/* The responder's windows, one per size, over its window area: type 2, bound to
 * its QP (IBA 10.6.7.2.2), so that a SEND_WITH_INV from the peer invalidates it. */
static void bind_windows(struct Side *s, struct Endpoint *me) {
  for (int k = 0; k < s->nsizes; k++) {
    struct ibv_mw *mw = ibv_alloc_mw(s->pd, IBV_MW_TYPE_2);
    if (!mw) fail("ibv_alloc_mw");
    struct ibv_send_wr wr = {.wr_id = 100u + (unsigned)k, .opcode = IBV_WR_BIND_MW,
                             .send_flags = IBV_SEND_SIGNALED}, *bad;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = (struct ibv_mw_bind_info){
        .mr = s->mr, .addr = (uintptr_t)s->buf + kWindowArea + k * kSlot, .length = kSlot,
        .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
    if (ibv_post_send(s->qp, &wr, &bad)) fail("bind the window");
    if (poll_one(s->send_cq).status != IBV_WC_SUCCESS) fail("bind the window: completion");
    me->window_rkey[me->windows++] = wr.bind_mw.rkey;
  }
}

/* The requester's operations, in the order the responder expects them. */
static int ops_of_size(const struct Side *s, enum Op ops[3]) {
  int n = 0;
  ops[n++] = kSendImm;
  if (s->rc) ops[n++] = kWriteImm;
  if (s->rc && s->invalidate) ops[n++] = kSendInv;
  return n;
}

static const char *op_name(enum Op op) {
  return op == kSendImm ? "SEND_WITH_IMM" : op == kWriteImm ? "RDMA_WRITE_WITH_IMM" : "SEND_WITH_INV";
}

static int request(struct Side *s, const struct Endpoint *peer) {
  int errors = 0;
  for (int k = 0; k < s->nsizes; k++) {
    enum Op ops[3];
    for (int j = 0, n = ops_of_size(s, ops); j < n; j++) {
      struct ibv_sge sge = {(uintptr_t)s->buf + kWindowArea, (uint32_t)s->sizes[k], s->mr->lkey};
      struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = s->sizes[k] ? 1 : 0,
                               .send_flags = IBV_SEND_SIGNALED}, *bad;
      wr.opcode = ops[j] == kSendImm ? IBV_WR_SEND_WITH_IMM
                  : ops[j] == kWriteImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_SEND_WITH_INV;
      if (ops[j] == kSendInv) wr.invalidate_rkey = peer->window_rkey[k];
      else wr.imm_data = htonl(imm_of(ops[j], k));
      wr.wr.rdma.remote_addr = peer->addr + kWriteArea + (uint64_t)k * kSlot;
      wr.wr.rdma.rkey = peer->rkey;
      if (!s->rc) {
        wr.wr.ud.ah = s->ah;
        wr.wr.ud.remote_qpn = peer->qpn;
        wr.wr.ud.remote_qkey = kQkey;
      }
      if (ibv_post_send(s->qp, &wr, &bad)) fail("ibv_post_send");
      struct ibv_wc wc = poll_one(s->send_cq);
      printf("requester: %s of %d bytes: %s\n", op_name(ops[j]), s->sizes[k],
             ibv_wc_status_str(wc.status));
      errors += wc.status != IBV_WC_SUCCESS;
      if (!s->rc) usleep(20000); /* UD has no ACK: the receiver keeps up */
    }
  }
  return errors;
}

/* One receive completion against what operation `op` of size `k` must give. */
static int check_receive(const struct Side *s, const struct Endpoint *me, enum Op op, int k,
                         const struct ibv_wc *wc) {
  const int size = s->sizes[k], grh = s->rc ? 0 : kGrh;
  const unsigned char *data = op == kWriteImm ? s->buf + kWriteArea + k * kSlot
                                              : s->buf + wc->wr_id * kSlot + grh;
  int ok = wc->status == IBV_WC_SUCCESS && (int)wc->byte_len == size + grh;
  if (op == kWriteImm) ok = ok && wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM;
  else ok = ok && wc->opcode == IBV_WC_RECV;
  if (op == kSendInv) {
    ok = ok && (wc->wc_flags & s->with_inv) && wc->invalidated_rkey == me->window_rkey[k];
  } else {
    ok = ok && (wc->wc_flags & IBV_WC_WITH_IMM) && ntohl(wc->imm_data) == imm_of(op, k);
  }
  for (int i = 0; ok && i < size; i++) ok = data[i] == pattern(i);
  printf("responder: %s of %d bytes: %s, %u bytes, flags 0x%x, imm 0x%08x, invalidated 0x%08x: %s\n",
         op_name(op), size, ibv_wc_status_str(wc->status), wc->byte_len - grh, wc->wc_flags,
         ntohl(wc->imm_data), wc->invalidated_rkey, ok ? "as sent" : "WRONG");
  return ok;
}

static int respond(struct Side *s, const struct Endpoint *me) {
  int good = 0, expected = 0;
  for (int k = 0; k < s->nsizes; k++) {
    enum Op ops[3];
    for (int j = 0, n = ops_of_size(s, ops); j < n; j++, expected++) {
      struct ibv_wc wc = poll_one(s->recv_cq);
      good += check_receive(s, me, ops[j], k, &wc);
    }
  }
  return expected - good;
}

static void parse_sizes(struct Side *s, char *list) {
  for (char *t = strtok(list, ","); t && s->nsizes < kMaxSizes; t = strtok(NULL, ",")) {
    s->sizes[s->nsizes] = atoi(t);
    if (s->sizes[s->nsizes] < 0 || s->sizes[s->nsizes] > kSlot - kGrh) fail("-s: a size");
    s->nsizes++;
  }
}

int main(int argc, char **argv) {
  struct Side s = {.rc = 1, .gid_index = 1};
  const char *device = "rxe0";
  int port = 18515, o;
  while ((o = getopt(argc, argv, "c:d:g:p:s:i")) != -1) {
    switch (o) {
      case 'c': s.rc = strcmp(optarg, "ud") != 0; break;
      case 'd': device = optarg; break;
      case 'g': s.gid_index = atoi(optarg); break;
      case 'p': port = atoi(optarg); break;
      case 's': parse_sizes(&s, optarg); break;
      case 'i': s.invalidate = 1; break;
      default: fprintf(stderr, "usage: see the head of verbs_ops.c\n"); return 2;
    }
  }
  const char *address = optind < argc ? argv[optind] : NULL;
  if (s.nsizes == 0) parse_sizes(&s, (char[]){"0,8,3000"});
  open_side(&s, device);
  union ibv_gid gid;
  if (ibv_query_gid(s.ctx, 1, s.gid_index, &gid)) fail("ibv_query_gid");
  struct Endpoint me = {.qpn = s.qp->qp_num, .psn = address ? 0xfffff8 : 0x100,
                        .rkey = s.mr->rkey, .addr = (uintptr_t)s.buf}, peer;
  memcpy(me.gid, gid.raw, 16);
  int fd = side_channel(address, port);
  exchange(fd, &me, &peer, sizeof me);  /* QPs first: the windows bind on an RTS QP */
  connect_qp(&s, &me, &peer);
  if (!address && s.rc && s.invalidate) bind_windows(&s, &me);
  exchange(fd, &me, &peer, sizeof me);
  int mine = address ? request(&s, &peer) : respond(&s, &me), theirs;
  exchange(fd, &mine, &theirs, sizeof mine);
  printf("%s: %d failed here, %d there\n", address ? "requester" : "responder", mine, theirs);
  return mine || theirs;
}
