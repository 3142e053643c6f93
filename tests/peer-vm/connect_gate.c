/* connect_gate.so: holds a program's N-th rdma_connect() until the peer VM has
 * shown its N-th listener, for clients whose server listens again mid-run.
 *
 * perftest 4.5-0.17 with -R (Debian 12's) connects twice: once to exchange
 * parameters, then at once again for the measured QPs, while its server only
 * starts the second rdma_listen() after allocating its buffers. A server in the
 * emulated guest is seconds behind a client on the host, so the second REQ meets
 * no listener, the kernel answers REJ "invalid service ID" (IBA 12.6.7.2 reason
 * 8), and perftest's own retry then reuses the ids it has just destroyed and
 * crashes (fixed upstream in rdma_cm_client_connection). That is the tool's race,
 * not the wire's: this shim makes the client wait for the event it needs instead.
 *
 * The guest side of scripts/interop.py writes $PEERVM_CONNECT_GATE.N when it sees
 * the N-th distinct listening cm_id on the case's port (`rdma res show cm_id`).
 * Call N of rdma_connect() waits for that file (PEERVM_CONNECT_GATE_SECONDS,
 * default 120), then goes on to the real rdma_connect().
 *
 * A server on this host over iWARP (tests/conformance/run_client.py, --gate):
 * CONNECT_GATE_TCP_PORT=P. An iWARP rdma_listen is a TCP listener, and perftest's
 * server closes its first before it opens its second: call N >= 2 waits (at most
 * 10 s) until /proc/net/tcp{,6} shows a listener on P that was not there at call
 * N - 1 (by socket inode).
 *
 * A server in another network namespace: CONNECT_GATE_NET_DIR (below) is read
 * for its TCP tables too.
 *
 * A softrdma server on this host or in another network namespace (tests/
 * conformance/shared_address_cm.sh, shared_address_fabric.sh, bench/lossy_fabric.
 * sh): the same library preloaded in the server with CONNECT_GATE_MARK=PREFIX
 * creates PREFIX.N when its N-th rdma_listen() has returned, and the client waits
 * for it with PEERVM_CONNECT_GATE=PREFIX as above. The mark is the event itself:
 * a listener seen by its port's reservation (bound at rdma_bind_addr) could still
 * be a moment from rdma_listen on a loaded machine, and a REQ in that moment is
 * refused, reason 8 (a CI failure, ASan build). With no variable set the calls
 * only pass through.
 *
 *   cc -shared -fPIC -o connect_gate.so connect_gate.c -ldl   (scripts/interop.py)
 *   LD_PRELOAD=connect_gate.so PEERVM_CONNECT_GATE=/run/dir/listen ib_read_bw -R ... */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Only pointers pass through: no librdmacm header needed. */
struct rdma_cm_id;
struct rdma_conn_param;
typedef int (*connect_fn)(struct rdma_cm_id *, struct rdma_conn_param *);

static int connect_calls;

/* TCP listeners on `port` in `net_dir` (a namespace's /proc/.../net), by socket
 * inode, into `out` (at most `room`). */
static int tcp_listeners(const char *net_dir, unsigned port, unsigned long *out, int room) {
  static const char *const tables[] = {"tcp", "tcp6"};
  int n = 0;
  for (int t = 0; t < 2; ++t) {
    char table[4200];
    snprintf(table, sizeof table, "%s/%s", net_dir, tables[t]);
    FILE *f = fopen(table, "r");
    if (!f) continue;
    char line[512];
    if (!fgets(line, sizeof line, f)) line[0] = 0; /* the header */
    while (fgets(line, sizeof line, f) && n < room) {
      char local[128], remote[128], state[8];
      unsigned long inode = 0;
      if (sscanf(line, "%*s %127s %127s %7s %*s %*s %*s %*s %*s %lu", local, remote, state,
                 &inode) != 4)
        continue;
      const char *colon = strrchr(local, ':');
      if (colon && strtoul(colon + 1, NULL, 16) == port && strcmp(state, "0A") == 0)
        out[n++] = inode;
    }
    fclose(f);
  }
  return n;
}

static int contains(const unsigned long *set, int n, unsigned long v) {
  for (int i = 0; i < n; ++i)
    if (set[i] == v) return 1;
  return 0;
}

/* The listeners the gate watches: TCP ones on a port of a namespace. */
struct watched {
  unsigned tcp_port;
  const char *net_dir;
};

static int listeners(const struct watched *w, unsigned long *out, int room) {
  return tcp_listeners(w->net_dir, w->tcp_port, out, room);
}

/* Call N >= 2 waits for a listener that call N - 1 did not see. */
static void wait_for_new_listener(const struct watched *w, int number) {
  enum { kRoom = 16 };
  static unsigned long seen[kRoom];
  static int seen_count;
  unsigned long now[kRoom];
  const struct timespec step = {0, 5 * 1000 * 1000};
  for (int waited_ms = 0; number >= 2; waited_ms += 5) {
    const int n = listeners(w, now, kRoom);
    int fresh = 0;
    for (int i = 0; i < n; ++i) fresh |= !contains(seen, seen_count, now[i]);
    if (fresh || waited_ms >= 10000) break;
    nanosleep(&step, NULL); /* /proc/net/ tells no one: looked at every 5 ms */
  }
  seen_count = listeners(w, seen, kRoom);
}

static void wait_for_listener(const char *gate, int number) {
  char path[4096];
  snprintf(path, sizeof path, "%s.%d", gate, number);
  const char *limit_text = getenv("PEERVM_CONNECT_GATE_SECONDS");
  long limit_ms = 1000L * (limit_text ? atol(limit_text) : 120);
  /* The file appears on the host when the guest creates it over 9p: looked for
   * every 20 ms (the event itself; a wait bounded by the limit, not a pace). */
  const struct timespec step = {0, 20 * 1000 * 1000};
  for (long waited_ms = 0; access(path, F_OK) != 0; waited_ms += 20) {
    if (waited_ms >= limit_ms) {
      fprintf(stderr, "connect_gate: no %s after %ld s; connecting anyway\n", path,
              limit_ms / 1000);
      return;
    }
    nanosleep(&step, NULL);
  }
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param) {
  static connect_fn real_connect;
  if (!real_connect) real_connect = (connect_fn)dlsym(RTLD_NEXT, "rdma_connect");
  if (!real_connect) {
    fprintf(stderr, "connect_gate: no rdma_connect after this library\n");
    return -1;
  }
  const char *gate = getenv("PEERVM_CONNECT_GATE");
  const char *tcp_port = getenv("CONNECT_GATE_TCP_PORT");
  const char *net_dir = getenv("CONNECT_GATE_NET_DIR");
  int number = __atomic_add_fetch(&connect_calls, 1, __ATOMIC_RELAXED);
  if (gate && *gate) wait_for_listener(gate, number);
  if (tcp_port && *tcp_port) {
    const struct watched w = {(unsigned)atoi(tcp_port), net_dir && *net_dir ? net_dir : "/proc/net"};
    wait_for_new_listener(&w, number);
  }
  return real_connect(id, conn_param);
}

typedef int (*listen_fn)(struct rdma_cm_id *, int);
static int listen_calls;

/* The server's side (CONNECT_GATE_MARK): PREFIX.N once the N-th listen succeeded. */
int rdma_listen(struct rdma_cm_id *id, int backlog) {
  static listen_fn real_listen;
  if (!real_listen) real_listen = (listen_fn)dlsym(RTLD_NEXT, "rdma_listen");
  if (!real_listen) {
    fprintf(stderr, "connect_gate: no rdma_listen after this library\n");
    return -1;
  }
  const int result = real_listen(id, backlog);
  const char *mark = getenv("CONNECT_GATE_MARK");
  if (result == 0 && mark && *mark) {
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", mark, __atomic_add_fetch(&listen_calls, 1, __ATOMIC_RELAXED));
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
    else fprintf(stderr, "connect_gate: cannot create %s\n", path);
  }
  return result;
}
