/*
 * verbs_check: an ordinary verbs program (C, <infiniband/verbs.h>, linked
 * against the system's libibverbs like any rdma-core client) that checks bytes
 * end to end between two processes, run on softrdma through LD_LIBRARY_PATH:
 *
 *   server:  verbs_check -p PORT [-g GID_INDEX]
 *   client:  verbs_check -p PORT [-g GID_INDEX] SERVER_IP
 *
 * Both exchange QPN, PSN, GID, rkey and buffer address over TCP, connect RC
 * QPs, then the client does: RDMA WRITE, RDMA READ, SEND with immediate,
 * FETCH_AND_ADD, COMPARE_AND_SWAP, and a WRITE with a wrong rkey, which must
 * complete with IBV_WC_REM_ACCESS_ERR and give the server IBV_EVENT_QP_ACCESS_ERR.
 * The server then checks its memory and tells the client the verdict. Exit 0
 * when every check held on both sides; each failure is printed.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
  kBuf = 65536,
  kWriteAt = 0, kWriteLen = 10000,   /* client WRITEs here */
  kReadAt = 20000, kReadLen = 10000, /* client READs the server's bytes here */
  kRecvAt = 32768, kSendLen = 3000,  /* the SEND lands here */
  kCounterAt = 40000,                /* the atomics' 8-byte word */
};
static const uint32_t kImm = 0x12345678;

struct peer {
  uint32_t qpn, psn, rkey;
  uint64_t addr;
  union ibv_gid gid;
};

struct ctx {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;
  uint8_t *buf;
  int failures;
};

#define CHECK(cond, ...)                       \
  do {                                         \
    if (!(cond)) {                             \
      fprintf(stderr, "FAIL: " __VA_ARGS__);   \
      fprintf(stderr, "\n");                   \
      c->failures++;                           \
    }                                          \
  } while (0)

static uint8_t pattern(int who, size_t i) { return (uint8_t)(who * 31 + i * 7 + (i >> 8)); }

static int tcp_connect(const char *host, int port, int server) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                           .ai_flags = server ? AI_PASSIVE : 0};
  struct addrinfo *res;
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  if (getaddrinfo(host, service, &hints, &res) != 0) return -1;
  int fd = socket(res->ai_family, res->ai_socktype, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int ok = server ? bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, 1) == 0
                  : connect(fd, res->ai_addr, res->ai_addrlen) == 0;
  freeaddrinfo(res);
  if (!ok) return close(fd), -1;
  if (!server) return fd;
  int conn = accept(fd, NULL, NULL);
  close(fd);
  return conn;
}

static int exchange(int fd, const void *mine, void *theirs, size_t len) {
  return write(fd, mine, len) == (ssize_t)len && recv(fd, theirs, len, MSG_WAITALL) == (ssize_t)len
             ? 0 : -1;
}

static int setup(struct ctx *c) {
  struct ibv_device **list = ibv_get_device_list(NULL);
  if (!list || !list[0]) return fprintf(stderr, "no verbs device\n"), -1;
  c->ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!c->ctx) return perror("ibv_open_device"), -1;
  c->pd = ibv_alloc_pd(c->ctx);
  c->cq = ibv_create_cq(c->ctx, 16, NULL, NULL, 0);
  c->buf = calloc(1, kBuf);
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
               IBV_ACCESS_REMOTE_ATOMIC;
  c->mr = c->pd ? ibv_reg_mr(c->pd, c->buf, kBuf, access) : NULL;
  struct ibv_qp_init_attr init = {.send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 8, .max_recv_wr = 8,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
  c->qp = c->mr && c->cq ? ibv_create_qp(c->pd, &init) : NULL;
  if (!c->qp) return perror("creating PD/CQ/MR/QP"), -1;
  return 0;
}

static int connect_qp(struct ctx *c, const struct peer *me, const struct peer *them, int gidx) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_ATOMIC};
  if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                   IBV_QP_ACCESS_FLAGS))
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = them->qpn;
  a.rq_psn = them->psn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = them->gid;
  a.ah_attr.grh.sgid_index = (uint8_t)gidx;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                   IBV_QP_MIN_RNR_TIMER))
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = me->psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  return ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                      IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Waits for one completion (a 30 s liveness guard, not a timing check). */
static int wait_wc(struct ctx *c, struct ibv_wc *wc) {
  time_t give_up = time(NULL) + 30;
  while (time(NULL) < give_up) {
    int n = ibv_poll_cq(c->cq, 1, wc);
    if (n != 0) return n == 1 ? 0 : -1;
  }
  fprintf(stderr, "FAIL: no completion\n");
  c->failures++;
  return -1;
}

/* Posts one signaled WR and checks its completion's status and opcode. */
static void run_wr(struct ctx *c, struct ibv_send_wr *wr, enum ibv_wc_status want_status,
                   enum ibv_wc_opcode want_opcode, const char *what) {
  struct ibv_send_wr *bad;
  struct ibv_wc wc;
  wr->send_flags = IBV_SEND_SIGNALED;
  CHECK(ibv_post_send(c->qp, wr, &bad) == 0, "%s: ibv_post_send", what);
  if (wait_wc(c, &wc)) return;
  CHECK(wc.status == want_status, "%s: status %s, expected %s", what,
        ibv_wc_status_str(wc.status), ibv_wc_status_str(want_status));
  if (want_status == IBV_WC_SUCCESS) CHECK(wc.opcode == want_opcode, "%s: opcode %d", what, wc.opcode);
}

static void client_ops(struct ctx *c, const struct peer *them) {
  struct ibv_sge sge = {.lkey = c->mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1};
  for (size_t i = 0; i < kBuf; ++i) c->buf[i] = pattern(2, i);
  sge.addr = (uintptr_t)(c->buf + kWriteAt), sge.length = kWriteLen;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = them->addr + kWriteAt, wr.wr.rdma.rkey = them->rkey;
  run_wr(c, &wr, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "WRITE");
  sge.addr = (uintptr_t)(c->buf + kReadAt), sge.length = kReadLen;
  memset(c->buf + kReadAt, 0, kReadLen);
  wr.opcode = IBV_WR_RDMA_READ;
  wr.wr.rdma.remote_addr = them->addr + kReadAt;
  run_wr(c, &wr, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "READ");
  for (size_t i = 0; i < kReadLen; ++i)
    if (c->buf[kReadAt + i] != pattern(1, kReadAt + i)) {
      CHECK(0, "READ: byte %zu differs", i);
      break;
    }
  sge.addr = (uintptr_t)c->buf, sge.length = kSendLen;
  wr.opcode = IBV_WR_SEND_WITH_IMM, wr.imm_data = htobe32(kImm);
  run_wr(c, &wr, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND_WITH_IMM");
  uint64_t *result = (uint64_t *)(c->buf + 60000);
  sge.addr = (uintptr_t)result, sge.length = 8;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.wr.atomic.remote_addr = them->addr + kCounterAt, wr.wr.atomic.rkey = them->rkey;
  wr.wr.atomic.compare_add = 5;
  run_wr(c, &wr, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD, "FETCH_AND_ADD");
  CHECK(*result == 100, "FETCH_AND_ADD returned %llu, expected 100", (unsigned long long)*result);
  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 105, wr.wr.atomic.swap = 7;
  run_wr(c, &wr, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP, "CMP_AND_SWP");
  CHECK(*result == 105, "CMP_AND_SWP returned %llu, expected 105", (unsigned long long)*result);
  sge.addr = (uintptr_t)c->buf, sge.length = 64;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = them->addr, wr.wr.rdma.rkey = them->rkey ^ 0x00ff00ff;
  run_wr(c, &wr, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE, "WRITE with a wrong rkey");
}

/* The server's side: the SEND's receive completion, the responder's access
 * error event, and the bytes the client's operations left in its memory. */
static void server_checks(struct ctx *c) {
  struct ibv_wc wc;
  if (wait_wc(c, &wc) == 0) {
    CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV, "SEND: receive completion");
    CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == kImm, "SEND: immediate");
    CHECK(wc.byte_len == kSendLen, "SEND: byte_len %u", wc.byte_len);
  }
  for (size_t i = 0; i < kSendLen; ++i)
    if (c->buf[kRecvAt + i] != pattern(2, i)) {
      CHECK(0, "SEND: byte %zu differs", i);
      break;
    }
  for (size_t i = 0; i < kWriteLen; ++i)
    if (c->buf[kWriteAt + i] != pattern(2, kWriteAt + i)) {
      CHECK(0, "WRITE: byte %zu differs", i);
      break;
    }
  uint64_t counter;
  memcpy(&counter, c->buf + kCounterAt, 8);
  CHECK(counter == 7, "atomics left %llu, expected 7", (unsigned long long)counter);
  struct pollfd p = {.fd = c->ctx->async_fd, .events = POLLIN};
  struct ibv_async_event ev;
  if (poll(&p, 1, 30000) == 1 && ibv_get_async_event(c->ctx, &ev) == 0) {
    CHECK(ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == c->qp,
          "async event %s", ibv_event_type_str(ev.event_type));
    ibv_ack_async_event(&ev);
  } else {
    CHECK(0, "no async event for the wrong rkey");
  }
}

int main(int argc, char **argv) {
  int port = 18515, gidx = 1, opt;
  while ((opt = getopt(argc, argv, "p:g:")) != -1) {
    if (opt == 'p') port = atoi(optarg);
    else if (opt == 'g') gidx = atoi(optarg);
    else return fprintf(stderr, "usage: %s -p PORT [-g GID] [SERVER]\n", argv[0]), 2;
  }
  const char *server = optind < argc ? argv[optind] : NULL;
  struct ctx cs = {0}, *c = &cs;
  if (setup(c)) return 1;
  struct peer me = {.qpn = c->qp->qp_num, .psn = (uint32_t)(getpid() & 0xffffff),
                    .rkey = c->mr->rkey, .addr = (uintptr_t)c->buf}, them;
  if (ibv_query_gid(c->ctx, 1, gidx, &me.gid)) return perror("ibv_query_gid"), 1;
  int fd = tcp_connect(server, port, server == NULL);
  if (fd < 0 || exchange(fd, &me, &them, sizeof me)) return perror("TCP exchange"), 1;
  if (connect_qp(c, &me, &them, gidx)) return perror("ibv_modify_qp"), 1;
  if (!server) {  /* server: its pattern to be READ, the counter, one receive */
    for (size_t i = 0; i < kBuf; ++i) c->buf[i] = pattern(1, i);
    uint64_t counter = 100;
    memcpy(c->buf + kCounterAt, &counter, 8);
    struct ibv_sge sge = {(uintptr_t)(c->buf + kRecvAt), 4096, c->mr->lkey};
    struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1}, *bad;
    int err = ibv_post_recv(c->qp, &rwr, &bad);
    if (err) return fprintf(stderr, "ibv_post_recv: %s\n", strerror(err)), 1;
  }
  char ready = 'r', verdict;
  if (exchange(fd, &ready, &verdict, 1)) return perror("TCP sync"), 1;
  if (server) client_ops(c, &them);
  char done = 'd';
  if (exchange(fd, &done, &verdict, 1)) return perror("TCP sync"), 1;
  if (!server) server_checks(c);
  char mine = c->failures ? 'F' : 'P';
  if (exchange(fd, &mine, &verdict, 1)) return perror("TCP verdict"), 1;
  ibv_destroy_qp(c->qp);
  ibv_dereg_mr(c->mr);
  ibv_destroy_cq(c->cq);
  ibv_dealloc_pd(c->pd);
  ibv_close_device(c->ctx);
  free(c->buf);
  close(fd);
  printf("%s: %s (peer: %s)\n", server ? "client" : "server", mine == 'P' ? "PASS" : "FAIL",
         verdict == 'P' ? "PASS" : "FAIL");
  return mine == 'P' && verdict == 'P' ? 0 : 1;
}
