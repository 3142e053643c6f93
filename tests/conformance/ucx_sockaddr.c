/* UCX's client/server (sockaddr) connection over softrdma (issue 8): a UCP
 * listener and a client endpoint made from an IP address and port, which UCX
 * connects through its rdma_cm connection manager (UCX_SOCKADDR_TLS_PRIORITY=
 * rdmacm) on softrdma's librdmacm; then a message goes each way over the
 * transport UCX picked (UCX_TLS) and every byte is checked.
 *
 *   ucx_sockaddr server PORT         waits for one client, echoes its message
 *   ucx_sockaddr client ADDR PORT    sends SIZE bytes, checks the echo
 * Prints "ucx sockaddr: N bytes echoed" and exits 0 on success. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>

#define SIZE 65536
#define TAG 0x5eed

static ucp_conn_request_h pending;

/* The listener is softrdma's rdma_cm one (and not UCX's TCP connection manager):
 * softrdma's librdmacm holds the port as @softrdma-rdmacm/<ps>/<port>/<address>
 * (docs/decisions/rdma-cm.md). */
static int held_by_rdma_cm(int port) {
  char needle[64], line[512];
  snprintf(needle, sizeof needle, "@softrdma-rdmacm/106/%d/", port);
  FILE *f = fopen("/proc/net/unix", "r");
  int found = 0;
  while (f != NULL && !found && fgets(line, sizeof line, f) != NULL) found = strstr(line, needle) != NULL;
  if (f != NULL) fclose(f);
  return found;
}

static void on_connection(ucp_conn_request_h request, void *arg) {
  (void)arg;
  pending = request;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

/* Progresses until the request completes (a guard of 60 s against a hang);
 * `what` null: a failure is not reported (closing after the peer has). */
static int wait_for(ucp_worker_h worker, void *request, const char *what) {
  if (request == NULL) return 0;
  if (UCS_PTR_IS_ERR(request)) {
    if (what != NULL) fprintf(stderr, "%s: %s\n", what, ucs_status_string(UCS_PTR_STATUS(request)));
    return -1;
  }
  double deadline = now() + 60;
  ucs_status_t status;
  while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS && now() < deadline)
    ucp_worker_progress(worker);
  ucp_request_free(request);
  if (status != UCS_OK && what != NULL) fprintf(stderr, "%s: %s\n", what, ucs_status_string(status));
  return status == UCS_OK ? 0 : -1;
}

static int exchange(ucp_worker_h worker, ucp_ep_h ep, int server) {
  static unsigned char out[SIZE], in[SIZE];
  ucp_request_param_t param = {0};
  for (int i = 0; i < SIZE; ++i) out[i] = (unsigned char)(i * 7 + (server ? 3 : 1));
  if (server) {
    if (wait_for(worker, ucp_tag_recv_nbx(worker, in, SIZE, TAG, ~0ull, &param), "recv") ||
        wait_for(worker, ucp_tag_send_nbx(ep, in, SIZE, TAG, &param), "echo"))
      return -1;
    return 0;
  }
  if (wait_for(worker, ucp_tag_send_nbx(ep, out, SIZE, TAG, &param), "send") ||
      wait_for(worker, ucp_tag_recv_nbx(worker, in, SIZE, TAG, ~0ull, &param), "recv echo"))
    return -1;
  if (memcmp(in, out, SIZE) != 0) {
    fprintf(stderr, "echo differs from what was sent\n");
    return -1;
  }
  printf("ucx sockaddr: %d bytes echoed\n", SIZE);
  return 0;
}

static ucp_ep_h connect_or_accept(ucp_worker_h worker, int server, const char *addr, int port) {
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1) return NULL;
  ucp_ep_params_t ep_params = {0};
  ucp_ep_h ep = NULL;
  if (server) {
    ucp_listener_params_t lp = {0};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = (struct sockaddr *)&sin;
    lp.sockaddr.addrlen = sizeof sin;
    lp.conn_handler.cb = on_connection;
    ucp_listener_h listener;
    if (ucp_listener_create(worker, &lp, &listener) != UCS_OK) return NULL;
    if (!held_by_rdma_cm(port)) {
      fprintf(stderr, "the listener is not on softrdma's rdma_cm\n");
      return NULL;
    }
    printf("listening through rdma_cm\n");
    fflush(stdout);
    double deadline = now() + 60;
    while (pending == NULL && now() < deadline) ucp_worker_progress(worker);
    if (pending == NULL) return NULL;
    ep_params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    ep_params.conn_request = pending;
  } else {
    ep_params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep_params.sockaddr.addr = (struct sockaddr *)&sin;
    ep_params.sockaddr.addrlen = sizeof sin;
  }
  if (ucp_ep_create(worker, &ep_params, &ep) != UCS_OK) return NULL;
  return ep;
}

int main(int argc, char **argv) {
  int server = argc == 3 && strcmp(argv[1], "server") == 0;
  if (!server && !(argc == 4 && strcmp(argv[1], "client") == 0)) {
    fprintf(stderr, "usage: %s server PORT | client ADDR PORT\n", argv[0]);
    return 2;
  }
  ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
  ucp_context_h context;
  if (ucp_init(&params, NULL, &context) != UCS_OK) return 1;
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                            .thread_mode = UCS_THREAD_MODE_SINGLE};
  ucp_worker_h worker;
  if (ucp_worker_create(context, &wp, &worker) != UCS_OK) return 1;
  ucp_ep_h ep = server ? connect_or_accept(worker, 1, "0.0.0.0", atoi(argv[2]))
                       : connect_or_accept(worker, 0, argv[2], atoi(argv[3]));
  if (ep == NULL) {
    fprintf(stderr, "no connection\n");
    return 1;
  }
  int rc = exchange(worker, ep, server);
  /* The server's echo is "complete" once UCX has copied it out (eager bcopy), not
   * once it arrived: it closes in flush mode, which waits for the transport's
   * acknowledgements, so its echo is not cancelled with the QP (a forced close
   * destroys the QP with SENDs still posted; a NIC's speed hides that race, a
   * sender still in slow start does not). The client has what it waited for and
   * forces, so a server already gone cannot hold it. */
  ucp_request_param_t close_param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                     .flags = server ? 0 : UCP_EP_CLOSE_FLAG_FORCE};
  wait_for(worker, ucp_ep_close_nbx(ep, &close_param), NULL);
  ucp_worker_destroy(worker);
  ucp_cleanup(context);
  return rc == 0 ? 0 : 1;
}
