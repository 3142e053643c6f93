// The device list and contexts: ibv_get_device_list(3), ibv_open_device(3),
// ibv_fork_init(3) and their companions.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "verbs/attributes.h"
#include "verbs/objects.h"
#include "verbs/ops.h"
#include "verbs/process.h"

using namespace softrdma::verbs;

namespace {

// What rdma-core's provider init does for a context: the ops the inline verbs
// jump through, and the verbs_context header that makes the extended slots
// reachable (abi/README.md §3).
void init_context(Context& ctx, ibv_device* device, int async_fd, int cmd_fd) {
  ctx.device = &ctx.node->device();
  ctx.generation = Process::get().generation();
  ctx.inline_progress = !ctx.node->settings().progress_thread;
  ibv_context& c = ctx.vctx.context;
  c.device = device;
  c.ops.poll_cq = op_poll_cq;
  c.ops.req_notify_cq = op_req_notify_cq;
  c.ops.post_send = op_post_send;
  c.ops.post_recv = op_post_recv;
  c.ops.post_srq_recv = op_post_srq_recv;
  c.ops.alloc_mw = op_alloc_mw;
  c.ops.dealloc_mw = op_dealloc_mw;
  c.ops.bind_mw = op_bind_mw;
  // A real descriptor, as applications and pyverbs dup it (issue 7); there is no
  // kernel object behind it, so ibv_import_device on it answers EOPNOTSUPP.
  c.cmd_fd = cmd_fd;
  c.async_fd = async_fd;
  c.num_comp_vectors = 1;
  pthread_mutex_init(&c.mutex, nullptr);
  c.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx.vctx.sz = sizeof(verbs_context);
  ctx.vctx.query_port = op_query_port;
  ctx.vctx.query_device_ex = op_query_device_ex;
  ctx.vctx.create_qp_ex = op_create_qp_ex;
  ctx.vctx.create_srq_ex = op_create_srq_ex;
  ctx.vctx.get_srq_num = op_get_srq_num;
  ctx.vctx.post_srq_ops = op_post_srq_ops;
  ctx.vctx.open_xrcd = op_open_xrcd;
  ctx.vctx.close_xrcd = op_close_xrcd;
  ctx.vctx.create_cq_ex = op_create_cq_ex;
  ctx.vctx.query_rt_values = op_query_rt_values;
  ctx.vctx.advise_mr = op_advise_mr;
  ctx.vctx.alloc_td = op_alloc_td;
  ctx.vctx.dealloc_td = op_dealloc_td;
  ctx.vctx.alloc_parent_domain = op_alloc_parent_domain;
  ctx.vctx.alloc_dm = op_alloc_dm;
  ctx.vctx.free_dm = op_free_dm;
  ctx.vctx.reg_dm_mr = op_reg_dm_mr;
}

}  // namespace

SOFTRDMA_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  return guard_ptr([&]() -> ibv_device** {
    ibv_device* device = Process::get().device();
    auto** list = static_cast<ibv_device**>(std::calloc(2, sizeof(ibv_device*)));
    if (list == nullptr) return fail(ENOMEM);
    list[0] = device;  // null (an empty list) when the settings are malformed
    if (num_devices != nullptr) *num_devices = device != nullptr ? 1 : 0;
    return list;
  });
}

SOFTRDMA_EXPORT void ibv_free_device_list(ibv_device** list) { std::free(list); }

SOFTRDMA_EXPORT const char* ibv_get_device_name(ibv_device* device) {
  return device != nullptr ? device->name : nullptr;
}

// ibv_get_device_index(3): the kernel's index of the device; ours is the only one.
SOFTRDMA_EXPORT int ibv_get_device_index(ibv_device* device) {
  return device == Process::get().device() ? 0 : -1;
}

// The GUID comes from the address, which is known once the OpenDevice has bound it:
// opened for the question if no context holds it (ibv_devices asks before any
// ibv_open_device).
SOFTRDMA_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  try {
    if (device != Process::get().device()) return 0;
    int err = 0;
    softrdma::runtime::OpenDevice* node = Process::get().acquire(err);
    if (node == nullptr) return 0;
    const __be64 guid = guid_of(node->device().gids());
    Process::get().release();
    return guid;
  } catch (...) {
    return 0;
  }
}

namespace {

// A context over the process's OpenDevice; it owns `cmd_fd` (closed by ibv_close_device).
ibv_context* open_context(ibv_device* device, int cmd_fd) {
  const int async_fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  if (async_fd < 0) {
    const int err = errno;
    close(cmd_fd);
    return fail(err);
  }
  auto ctx = std::make_unique<Context>();
  int err = 0;
  ctx->node = Process::get().acquire(err);
  if (ctx->node == nullptr) {
    close(async_fd);
    close(cmd_fd);
    return fail(err);
  }
  init_context(*ctx, device, async_fd, cmd_fd);
  Process::get().add_context(ctx.get());
  return ctx.release()->ibv();
}

}  // namespace

SOFTRDMA_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  return guard_ptr([&]() -> ibv_context* {
    if (device == nullptr || device != Process::get().device()) return fail(ENODEV);
    // A memfd: a file of its own (a dup refers to the same inode), which
    // ibv_import_device recognises; there is no kernel verbs object behind it.
    const int cmd_fd = memfd_create("softrdma-context", MFD_CLOEXEC);
    if (cmd_fd < 0) return nullptr;  // errno from memfd_create
    return open_context(device, cmd_fd);
  });
}

// ibv_close_device(3): objects still open on the context are the application's
// to destroy first; closing the last context closes the process's OpenDevice.
SOFTRDMA_EXPORT int ibv_close_device(ibv_context* context) {
  Context* ctx = to_context(context);
  const bool stale = Process::get().stale(ctx);
  if (!stale) Process::get().remove_context(ctx);
  close(context->async_fd);
  if (ctx->qp_error_fd >= 0) close(ctx->qp_error_fd);
  close(context->cmd_fd);
  pthread_mutex_destroy(&context->mutex);
  if (!stale) Process::get().release();
  delete ctx;
  return 0;
}

// ibv_fork_init(3) protects registered memory from copy-on-write in the child,
// which a DMA engine would otherwise keep writing to the parent's old pages.
// Here the "DMA" is the parent's own progress thread writing through the
// parent's page tables, so the parent is always safe: nothing to do.
SOFTRDMA_EXPORT int ibv_fork_init(void) { return 0; }

SOFTRDMA_EXPORT ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

// ibv_import_device(3): another context on the device of the context whose
// cmd_fd `cmd_fd` duplicates, within this process (there is no kernel object to
// share between processes: another process's descriptor is EOPNOTSUPP). The new
// context owns `cmd_fd`; objects are shared through ibv_import_pd/ibv_import_mr.
SOFTRDMA_EXPORT ibv_context* ibv_import_device(int cmd_fd) {
  return guard_ptr([&]() -> ibv_context* {
    Context* original = Process::get().context_of_cmd_fd(cmd_fd);
    if (original == nullptr) return fail(EOPNOTSUPP);
    return open_context(original->vctx.context.device, cmd_fd);
  });
}

// ibv_read_sysfs_file: rdma-core's helper that reads dir/file (ibv_devinfo asks
// for the optional "board_id" under ibdev_path, the system librdmacm for ABI
// versions). softrdma's device has sysfs files only inside `softrdma run`'s view
// (tools/run/mount_view.h); elsewhere the file is missing (-1, ENOENT), as for
// any absent file. Returns the bytes read without a trailing newline, NUL-terminated;
// contents that fill the buffer without one cannot be terminated: -1.
SOFTRDMA_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf,
                                        size_t size) {
  return guard_minus1([&] {
    if (dir == nullptr || file == nullptr || buf == nullptr) return errno = EINVAL, -1;
    const std::string path = std::string(dir) + "/" + file;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;  // errno from open
    ssize_t len = read(fd, buf, size);
    const int read_errno = errno;
    close(fd);
    if (len < 0) return errno = read_errno, -1;
    if (len == 0) return 0;
    if (buf[len - 1] == '\n') {
      buf[--len] = '\0';
    } else if (size_t(len) < size) {
      buf[len] = '\0';
    } else {
      return errno = EOVERFLOW, -1;
    }
    return int(len);
  });
}
