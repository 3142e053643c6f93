/* bench/verb_ops: the instructions of one verb call (issue 26 "No loss of speed",
 * issue 29), for bench/verb_instructions.sh, which runs it under
 *   valgrind --tool=callgrind --collect-atstart=no
 * inside `softrdma run`. Only the measuring thread's instructions between two
 * CALLGRIND_TOGGLE_COLLECT are counted (callgrind's collection state is per
 * thread, and every other thread starts with it off): the inline verb of
 * <infiniband/verbs.h> and the provider's function it jumps to through
 * context->ops, nothing of the set-up, of the waits, or of the progress thread.
 * Each operation ends with CALLGRIND_DUMP_STATS_AT("op NAME calls N"), which
 * writes its totals to a file of its own and zeroes them.
 *
 *   verb_ops CALLS host|udp SOFTRDMA_COMMAND
 *
 * The peer is this program again (`verb_ops --peer FD`), started with exec so that
 * it runs natively. The path (SOFTRDMA_TRANSPORT) is the environment's; the program
 * checks with `softrdma status` that its QP took the one named, and that its
 * operations were counted there (host_ops on the same-host path, packets on UDP).
 * Without valgrind the client requests do nothing: the program then checks that
 * every operation works. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

#include "verb_ops.h"

struct Bench {
  struct End end;
  struct Endpoint remote;
  int fd;
  uint32_t calls;
  uint64_t sends;     /* SENDs posted to the peer so far */
  uint64_t executed;  /* WRITEs and SENDs executed so far */
};

/* Ends an operation's measurement: its totals into a file of their own. */
static void dump(const char* name, uint32_t calls) {
  char description[96];
  snprintf(description, sizeof description, "op %s calls %u", name, calls);
  CALLGRIND_DUMP_STATS_AT(description);
  printf("verb_ops: %-12s %u calls\n", name, calls);
}

/* The two client requests alone: what every counted call carries beyond the verb. */
static void calibration(struct Bench* b) {
  for (uint32_t i = 0; i < b->calls; ++i) {
    CALLGRIND_TOGGLE_COLLECT;
    CALLGRIND_TOGGLE_COLLECT;
  }
  dump("calibration", b->calls);
}

/* ibv_post_send of one signaled 8 B WRITE (or SEND), each completion awaited
 * uncounted before the next post: the post starts from an idle send queue. */
static void post_sends(struct Bench* b, enum ibv_wr_opcode opcode) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)b->end.buf, kMessageBytes, b->end.mr->lkey};
  for (uint32_t i = 0; i < b->calls; ++i) {
    CALLGRIND_TOGGLE_COLLECT;
    const int rc = post_one(b->end.qp, opcode, &sge, &b->remote);
    CALLGRIND_TOGGLE_COLLECT;
    if (rc != 0) die("ibv_post_send");
    wait_one(b->end.cq);
    ++b->executed;
    if (opcode != IBV_WR_SEND) continue;
    /* The peer re-posts each receive; every kChunk SENDs, wait until it has, so
     * that no SEND meets an empty receive queue (an RNR NAK and its retry). */
    if (++b->sends % kChunk == 0 || i + 1 == b->calls) {
      send_message(b->fd, kCmdReceived, (uint32_t)b->sends);
      if (receive_message(b->fd).count < b->sends) die("the peer's count");
    }
  }
  dump(opcode == IBV_WR_SEND ? "send" : "write", b->calls);
}

/* ibv_post_send of a list of kList 8 B WRITEs, the last one signaled, as perftest's
 * `ib_write_bw --post_list` posts them (the figure of docs/decisions/same-host.md);
 * counted per WRITE. */
static void post_write_lists(struct Bench* b) {
  enum { kList = 32 };
  struct ibv_sge sge = {(uint64_t)(uintptr_t)b->end.buf, kMessageBytes, b->end.mr->lkey};
  struct ibv_send_wr wr[kList];
  for (int i = 0; i < kList; ++i) {
    wr[i] = (struct ibv_send_wr){
        .next = i + 1 < kList ? &wr[i + 1] : NULL,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = i + 1 < kList ? 0 : IBV_SEND_SIGNALED,
        .wr.rdma = {b->remote.addr, b->remote.rkey},
    };
  }
  const uint32_t lists = (b->calls + kList - 1) / kList;
  for (uint32_t i = 0; i < lists; ++i) {
    struct ibv_send_wr* bad = NULL;
    CALLGRIND_TOGGLE_COLLECT;
    const int rc = ibv_post_send(b->end.qp, wr, &bad);
    CALLGRIND_TOGGLE_COLLECT;
    if (rc != 0) die("ibv_post_send");
    wait_one(b->end.cq);
    b->executed += kList;
  }
  dump("write_list", lists * kList);
}

/* ibv_post_recv of one 8 B receive, kChunk at a time; the peer's SENDs then
 * consume them, uncounted. */
static void post_recvs(struct Bench* b) {
  for (uint32_t done = 0; done < b->calls;) {
    const uint32_t chunk = b->calls - done < kChunk ? b->calls - done : kChunk;
    for (uint32_t i = 0; i < chunk; ++i) {
      CALLGRIND_TOGGLE_COLLECT;
      const int rc = post_recv_one(&b->end);
      CALLGRIND_TOGGLE_COLLECT;
      if (rc != 0) die("ibv_post_recv");
    }
    send_message(b->fd, kCmdSend, chunk);
    for (uint32_t i = 0; i < chunk; ++i)
      if (wait_one(b->end.cq).opcode != IBV_WC_RECV) die("a receive completion");
    if (receive_message(b->fd).count != chunk) die("the peer's SENDs");
    done += chunk;
  }
  dump("recv", b->calls);
}

/* ibv_poll_cq on a CQ with nothing outstanding, as an application's spin loop
 * between messages calls it. */
static void poll_empty(struct Bench* b) {
  struct ibv_wc wc;
  for (uint32_t i = 0; i < b->calls; ++i) {
    CALLGRIND_TOGGLE_COLLECT;
    const int n = ibv_poll_cq(b->end.cq, 1, &wc);
    CALLGRIND_TOGGLE_COLLECT;
    if (n != 0) die("an empty poll");
  }
  dump("poll_empty", b->calls);
}

/* ibv_poll_cq returning one completion that is already there: a WRITE's, awaited
 * (uncounted) through the completion channel, whose event follows the CQE. */
static void poll_one(struct Bench* b) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)b->end.buf, kMessageBytes, b->end.mr->lkey};
  for (uint32_t i = 0; i < b->calls; ++i) {
    if (ibv_req_notify_cq(b->end.cq, 0) != 0) die("ibv_req_notify_cq");
    if (post_one(b->end.qp, IBV_WR_RDMA_WRITE, &sge, &b->remote) != 0) die("ibv_post_send");
    struct ibv_cq* cq;
    void* context;
    if (ibv_get_cq_event(b->end.channel, &cq, &context) != 0) die("ibv_get_cq_event");
    ibv_ack_cq_events(cq, 1);
    struct ibv_wc wc;
    CALLGRIND_TOGGLE_COLLECT;
    const int n = ibv_poll_cq(b->end.cq, 1, &wc);
    CALLGRIND_TOGGLE_COLLECT;
    if (n != 1 || wc.status != IBV_WC_SUCCESS) die("a poll after the event");
    ++b->executed;
  }
  dump("poll_one", b->calls);
}

/* This process's QP row of `softrdma status` ("  qp QPN  type RC  ... path P  tx N
 * rx N  retx N  host_ops N"): the path it took, and what it did there. */
static void check_path(const struct Bench* b, const char* softrdma, const char* path) {
  char command[4096];
  snprintf(command, sizeof command, "'%s' status 2>&1", softrdma);
  FILE* p = popen(command, "r");
  if (p == NULL) die("popen softrdma status");
  static char out[1 << 20];
  const size_t length = fread(out, 1, sizeof out - 1, p);
  out[length] = '\0';
  pclose(p);
  char key[64];
  snprintf(key, sizeof key, "\nprocess %d ", (int)getpid());
  const char* block = strstr(out, key);
  snprintf(key, sizeof key, "\n  qp %u  type RC", b->end.qp->qp_num);
  const char* row = block != NULL ? strstr(block, key) : NULL;
  char seen[16] = "";
  unsigned long long tx = 0, host_ops = 0;
  const char* at = row != NULL ? strstr(row, "  path ") : NULL;
  if (at == NULL || sscanf(at, "  path %15s  tx %llu  rx %*u  retx %*u  host_ops %llu", seen, &tx,
                           &host_ops) != 3) {
    fprintf(stderr, "verb_ops: no row for qp %u in\n%s", b->end.qp->qp_num, out);
    exit(1);
  }
  const int host = strcmp(path, "host") == 0;
  const unsigned long long done = host ? host_ops : tx;
  printf("verb_ops: qp %u path %s tx %llu host_ops %llu (%llu operations)\n", b->end.qp->qp_num,
         seen, tx, host_ops, (unsigned long long)b->executed);
  if (strcmp(seen, path) != 0 || done < b->executed || (!host && host_ops != 0)) {
    fprintf(stderr, "verb_ops: expected path %s to have carried every operation\n", path);
    exit(1);
  }
}

/* The peer, started with exec so that it runs natively under valgrind (which
 * follows no exec unless --trace-children=yes). */
static pid_t start_peer(const char* self, int* fd) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair");
  const pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    close(sv[0]);
    char number[16];
    snprintf(number, sizeof number, "%d", sv[1]);
    execl(self, self, "--peer", number, (char*)NULL);
    die("exec the peer");
  }
  close(sv[1]);
  *fd = sv[0];
  return pid;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "--peer") == 0) return peer_main(atoi(argv[2]));
  if (argc != 4 || (strcmp(argv[2], "host") != 0 && strcmp(argv[2], "udp") != 0)) {
    fprintf(stderr, "usage: %s CALLS host|udp SOFTRDMA_COMMAND\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct Bench b = {.calls = (uint32_t)strtoul(argv[1], NULL, 10)};
  if (b.calls == 0) die("CALLS");
  const pid_t peer = start_peer(argv[0], &b.fd);
  end_open(&b.end);
  b.remote = end_connect(&b.end, b.fd);
  receive_message(b.fd);  /* the peer's receives are posted */
  calibration(&b);
  post_sends(&b, IBV_WR_RDMA_WRITE);
  post_sends(&b, IBV_WR_SEND);
  post_write_lists(&b);
  post_recvs(&b);
  poll_empty(&b);
  poll_one(&b);
  check_path(&b, argv[3], argv[2]);
  send_message(b.fd, kCmdQuit, 0);
  int status = 0;
  if (waitpid(peer, &status, 0) != peer || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    die("the peer");
  end_close(&b.end);
  return 0;
}
