/* Issue 14 defect 4, for librdmacm: a program that dlopens softrdma's
 * librdmacm.so.1, listens on an rdma_cm id (which starts the CM agent's thread)
 * and dlcloses the library must not crash, and the library must stay loaded (it
 * is linked -z nodelete, docs/decisions/library-unload.md): the agent's thread
 * runs the library's code.
 *
 *   dlclose_check PATH/librdmacm.so.1     exit 0: survived */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct rdma_event_channel *(*create_channel_fn)(void);
typedef int (*create_id_fn)(struct rdma_event_channel *, struct rdma_cm_id **, void *,
                            enum rdma_port_space);
typedef int (*bind_fn)(struct rdma_cm_id *, struct sockaddr *);
typedef int (*listen_fn)(struct rdma_cm_id *, int);

static int listen_on_loopback(void *lib) {
  create_channel_fn create_channel = (create_channel_fn)dlsym(lib, "rdma_create_event_channel");
  create_id_fn create_id = (create_id_fn)dlsym(lib, "rdma_create_id");
  bind_fn bind_addr = (bind_fn)dlsym(lib, "rdma_bind_addr");
  listen_fn listen_id = (listen_fn)dlsym(lib, "rdma_listen");
  if (!create_channel || !create_id || !bind_addr || !listen_id) return -1;
  struct rdma_event_channel *channel = create_channel();
  struct rdma_cm_id *id = NULL;
  if (channel == NULL || create_id(channel, &id, NULL, RDMA_PS_TCP) != 0) return -1;
  struct sockaddr_in address;
  memset(&address, 0, sizeof address);
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind_addr(id, (struct sockaddr *)&address) != 0) return -1;
  return listen_id(id, 4);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH/librdmacm.so.1\n", argv[0]);
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  if (listen_on_loopback(lib) != 0) {
    fprintf(stderr, "could not listen through %s\n", argv[1]);
    return 2;
  }
  dlclose(lib);
  /* The agent's thread keeps running: give it time to run unmapped code, if
   * the library were gone (not an event: time passes on purpose, bounded). */
  struct timespec half_second = {0, 500 * 1000 * 1000};
  nanosleep(&half_second, NULL); /* not an event: see above */
  if (dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD) == NULL) {
    fprintf(stderr, "librdmacm was unloaded with its agent thread running\n");
    return 1;
  }
  printf("dlclose with a listening id: survived, library kept\n");
  return 0;
}
