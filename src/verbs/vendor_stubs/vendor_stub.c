/* Stub vendor library: every symbol of SOFTRDMA_STUB_DEF answers "not supported".
 *
 * perftest links libmlx5.so.1 and libefa.so.1 with BIND_NOW, and pyverbs' vendor
 * modules import their symbols, so both libraries must load and resolve every
 * symbol at its version node (the node comes from the version script). softrdma
 * is neither an mlx5 nor an EFA device, and its device claims neither vendor id,
 * so well-behaved clients never call these; if one does, it gets a clean
 * "not supported" instead of a crash.
 *
 * Why generic prototypes: the real prototypes differ per symbol, but a callee
 * that ignores its arguments is safe on every Linux ABI softrdma targets
 * (x86-64 and AArch64 pass them in registers, the caller pops stack arguments),
 * and only the return value has to match its register and width. The kind of
 * each stub is read from the real prototype by scripts/gen-version-script.py,
 * and signature_check.cc static_asserts it against the headers at build time.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Create/alloc/open calls: NULL with errno, as verbs create calls do. */
#define SOFTRDMA_STUB_PTR(name) \
  void *name(void) { errno = EOPNOTSUPP; return NULL; }
/* mlx5dv/efadv int calls return a positive errno on failure. */
#define SOFTRDMA_STUB_INT(name) \
  int name(void) { errno = EOPNOTSUPP; return EOPNOTSUPP; }
/* A file descriptor result: -1 with errno, never a number that looks like an fd. */
#define SOFTRDMA_STUB_FD(name) \
  int name(void) { errno = EOPNOTSUPP; return -1; }
/* A byte count (mlx5dv_devx_get_event): -1 with errno, as read(2) fails. */
#define SOFTRDMA_STUB_SSIZE(name) \
  ssize_t name(void) { errno = EOPNOTSUPP; return -1; }
/* *_is_supported queries: no. */
#define SOFTRDMA_STUB_BOOL(name) \
  bool name(void) { return false; }
/* free/destroy calls without a result: nothing was ever allocated. */
#define SOFTRDMA_STUB_VOID(name) \
  void name(void) {}

#define SOFTRDMA_STUB(kind, name, node) SOFTRDMA_STUB_##kind(name)
#include SOFTRDMA_STUB_DEF
