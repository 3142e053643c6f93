/* Issue 14 defect 4: a program that dlopens softrdma's libibverbs.so.1, opens a
 * device and dlcloses the library (as Open MPI's btl/openib does) must not crash:
 * the device's progress thread runs the library's code. Datagrams sent to the
 * device's address then wake that thread, so that a library unmapped under it
 * would fault; and the library must still be loaded (it is linked -z nodelete,
 * docs/decisions/library-unload.md).
 *
 *   dlclose_check PATH/libibverbs.so.1     exit 0: survived */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct ibv_device **(*get_device_list_fn)(int *);
typedef struct ibv_context *(*open_device_fn)(struct ibv_device *);
typedef int (*query_gid_fn)(struct ibv_context *, uint8_t, int, union ibv_gid *);

/* Opens the device and finds its IPv4 address: GID[1] (or [0]) is ::ffff:a.b.c.d
 * (docs/decisions/gid-table.md). */
static int open_device(void *lib, struct sockaddr_in *address) {
  get_device_list_fn get_list = (get_device_list_fn)dlsym(lib, "ibv_get_device_list");
  open_device_fn open_dev = (open_device_fn)dlsym(lib, "ibv_open_device");
  query_gid_fn query_gid = (query_gid_fn)dlsym(lib, "ibv_query_gid");
  if (!get_list || !open_dev || !query_gid) return -1;
  int n = 0;
  struct ibv_device **list = get_list(&n);
  if (list == NULL || n < 1) return -1;
  struct ibv_context *context = open_dev(list[0]);
  void (*free_list)(struct ibv_device **) =
      (void (*)(struct ibv_device **))dlsym(lib, "ibv_free_device_list");
  if (free_list) free_list(list); /* the context outlives the list (ibv_get_device_list(3)) */
  if (context == NULL) return -1;
  static const uint8_t ipv4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  union ibv_gid gid;
  memset(address, 0, sizeof *address);
  for (int index = 1; index >= 0; --index) {
    if (query_gid(context, 1, index, &gid) == 0 && memcmp(gid.raw, ipv4_mapped, 12) == 0) break;
    if (index == 0) return 0; /* IPv6 only (SOFTRDMA_ADDR): no datagrams, the check stays */
  }
  address->sin_family = AF_INET;
  address->sin_port = htons(4791);
  memcpy(&address->sin_addr, gid.raw + 12, 4);
  return 0; /* the context is never closed: the application forgot it */
}

/* Wakes the progress thread 100 times over about half a second. */
static void wake_progress_thread(const struct sockaddr_in *address) {
  if (address->sin_family != AF_INET) return;
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  const char junk[8] = "wake up";
  const struct timespec pause = {0, 5 * 1000 * 1000};
  for (int i = 0; i < 100; ++i) {
    sendto(fd, junk, sizeof junk, 0, (const struct sockaddr *)address, sizeof *address);
    nanosleep(&pause, NULL); /* not an event: wakes spread over time, on purpose */
  }
  close(fd);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH/libibverbs.so.1\n", argv[0]);
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  struct sockaddr_in address;
  if (lib == NULL || open_device(lib, &address) != 0) {
    fprintf(stderr, "dlclose_check: cannot open a device through %s: %s\n", argv[1],
            lib ? "verbs failed" : dlerror());
    return 2;
  }
  if (dlclose(lib) != 0) {
    fprintf(stderr, "dlclose_check: dlclose: %s\n", dlerror());
    return 2;
  }
  wake_progress_thread(&address);
  if (dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD) == NULL) {
    fprintf(stderr, "dlclose_check: the library was unloaded with its progress thread running\n");
    return 1;
  }
  puts("dlclose_check: survived dlclose with a device open");
  return 0;
}
