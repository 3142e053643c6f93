/* bench/verb_ops: the peer process, run natively (never under valgrind): the target
 * of the measuring process's WRITEs and SENDs, and the sender of the SENDs its
 * receives take. It blocks on its completion channel and its socket, so that it
 * leaves the CPUs to the measured process (the machines have two cores). */
#include <poll.h>
#include <stdbool.h>

#include "verb_ops.h"

struct Peer {
  struct End end;
  int fd;
  uint64_t received;   /* SENDs that arrived, each receive re-posted */
  uint64_t sent;       /* own SENDs completed */
  uint64_t announced;  /* kCmdReceived: answer once `received` reaches it (0: none) */
};

/* Takes every completion there is; a receive is re-posted at once, so the queue
 * stays full and no SEND of the measured process meets an empty queue (RNR). */
static void drain(struct Peer* p) {
  struct ibv_wc wc[16];
  int n;
  while ((n = ibv_poll_cq(p->end.cq, 16, wc)) > 0) {
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) die(ibv_wc_status_str(wc[i].status));
      if (wc[i].opcode == IBV_WC_RECV) {
        ++p->received;
        if (post_recv_one(&p->end) != 0) die("ibv_post_recv");
      } else {
        ++p->sent;
      }
    }
  }
  if (n < 0) die("ibv_poll_cq");
}

/* Arms the CQ, then takes what is there: a completion after the arming raises an
 * event, one before it is taken here (man ibv_req_notify_cq). */
static void arm_and_drain(struct Peer* p) {
  if (ibv_req_notify_cq(p->end.cq, 0) != 0) die("ibv_req_notify_cq");
  drain(p);
}

static void take_event(struct Peer* p) {
  struct ibv_cq* cq;
  void* context;
  if (ibv_get_cq_event(p->end.channel, &cq, &context) != 0) die("ibv_get_cq_event");
  ibv_ack_cq_events(cq, 1);
}

/* kCmdSend: `count` SENDs of 8 B, one at a time, each waited for. */
static void send_count(struct Peer* p, uint32_t count) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)p->end.buf, kMessageBytes, p->end.mr->lkey};
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t target = p->sent + 1;
    if (post_one(p->end.qp, IBV_WR_SEND, &sge, NULL) != 0) die("ibv_post_send");
    for (;;) {
      arm_and_drain(p);
      if (p->sent >= target) break;
      take_event(p);
    }
  }
  send_message(p->fd, kCmdSend, count);
}

/* Handles one command; false for kCmdQuit. */
static bool handle(struct Peer* p) {
  const struct Message m = receive_message(p->fd);
  switch (m.command) {
    case kCmdReceived:
      p->announced = m.count;
      return true;
    case kCmdSend:
      send_count(p, m.count);
      return true;
    case kCmdQuit:
      return false;
  }
  die("unknown command");
}

int peer_main(int fd) {
  struct Peer p = {.fd = fd};
  end_open(&p.end);
  end_connect(&p.end, fd);
  for (int i = 0; i < kRecvDepth; ++i)
    if (post_recv_one(&p.end) != 0) die("ibv_post_recv");
  send_message(fd, kCmdReceived, 0);  /* ready: every receive is posted */
  for (;;) {
    arm_and_drain(&p);
    if (p.announced != 0 && p.received >= p.announced) {
      send_message(fd, kCmdReceived, (uint32_t)p.received);
      p.announced = 0;
    }
    struct pollfd fds[2] = {{.fd = fd, .events = POLLIN}, {.fd = p.end.channel->fd, .events = POLLIN}};
    if (poll(fds, 2, -1) < 0) die("poll");
    if (fds[1].revents != 0) take_event(&p);
    if (fds[0].revents != 0 && !handle(&p)) break;
  }
  end_close(&p.end);
  return 0;
}
