// Device, port, GID and P_Key queries (ibv_query_device(3), ibv_query_port(3),
// ibv_query_gid(3), ibv_query_gid_ex(3), ibv_query_pkey(3)). Size-tagged queries
// write only as many bytes as the caller's structure has (abi/README.md §4):
// a binary built against older headers passes a shorter one.
#include <endian.h>

#include <algorithm>
#include <cstring>

#include "verbs/attributes.h"
#include "verbs/netdev.h"
#include "verbs/objects.h"
#include "verbs/ops.h"
#include "verbs/process.h"
#include "wire/ip_udp.h"

#undef ibv_query_port

using namespace softrdma::verbs;

// The port attributes of rdma-core before port_cap_flags2 was added: what the
// exported ibv_query_port@IBVERBS_1.1 fills (rdma-core libibverbs/verbs.c).
struct _compat_ibv_port_attr {
  ibv_port_state state;
  ibv_mtu max_mtu;
  ibv_mtu active_mtu;
  int gid_tbl_len;
  uint32_t port_cap_flags;
  uint32_t max_msg_sz;
  uint32_t bad_pkey_cntr;
  uint32_t qkey_viol_cntr;
  uint16_t pkey_tbl_len;
  uint16_t lid;
  uint16_t sm_lid;
  uint8_t lmc;
  uint8_t max_vl_num;
  uint8_t sm_sl;
  uint8_t subnet_timeout;
  uint8_t init_type_reply;
  uint8_t active_width;
  uint8_t active_speed;
  uint8_t phys_state;
  uint8_t link_layer;
  uint8_t flags;
};
static_assert(offsetof(_compat_ibv_port_attr, flags) == offsetof(ibv_port_attr, flags));

// rdma-core's private sysfs GID type (libibverbs/driver.h), not in the public
// headers: what /sys/class/infiniband/*/ports/*/gid_attrs/types/* says.
enum ibv_gid_type_sysfs {
  IBV_GID_TYPE_SYSFS_IB_ROCE_V1 = 0,
  IBV_GID_TYPE_SYSFS_ROCE_V2 = 1,
};

namespace {


// One GID table entry as ibv_query_gid_ex(3) describes it. The engine's table
// (engine/device.cc) fills the first slots, all RoCEv2 (Annex A17) GIDs; the rest
// of the port's kGidTableLength slots are empty: ENODATA (ibv_query_gid_ex(3)).
int gid_entry(Context* ctx, uint32_t port_num, uint32_t index, ibv_gid_entry& entry) {
  const auto& gids = ctx->device->gids();
  if (port_num != 1 || index >= kGidTableLength) return EINVAL;
  if (index >= gids.size()) return ENODATA;
  entry = ibv_gid_entry{};
  std::memcpy(entry.gid.raw, gids[index].data(), sizeof entry.gid.raw);
  entry.gid_index = index;
  entry.port_num = port_num;
  entry.gid_type = IBV_GID_TYPE_ROCE_V2;
  entry.ndev_ifindex = netdev_of(ctx->device->transport().local_gid()).ifindex;
  return 0;
}

}  // namespace

namespace softrdma::verbs {

int op_query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* attr,
                  size_t attr_len) {
  return guard_errno([&] {
    Context* ctx = to_context(context);
    if (!live(ctx)) return EIO;
    if (port_num != 1) return EINVAL;
    ibv_port_attr full;
    fill_port_attr(*ctx, full);
    std::memcpy(attr, &full, std::min(attr_len, sizeof full));
    return 0;
  });
}

// ibv_query_device_ex(3). The inline wrapper already rejected input->comp_mask.
int op_query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input,
                       ibv_device_attr_ex* attr, size_t attr_size) {
  return guard_errno([&] {
    // No live() check: the attributes are the device's fixed answers, readable in a
    // forked child on its parent's context too (as a kernel context's are; pyverbs
    // queries them there before allocating device memory).
    Context* ctx = to_context(context);
    if ((input != nullptr && input->comp_mask != 0) || attr_size < sizeof(ibv_device_attr))
      return EINVAL;
    ibv_device_attr_ex full;
    fill_device_attr_ex(*ctx, full);
    std::memcpy(attr, &full, std::min(attr_size, sizeof full));
    return 0;
  });
}

// ibv_query_rt_values_ex(3): "the provider has to query this value somehow and
// mark the queried values in the comp_mask field". The raw clock is the device
// clock (attributes.h), as a timespec of its nanoseconds; bits beyond
// IBV_VALUES_MASK_RAW_CLOCK are EINVAL, as mlx5 answers.
int op_query_rt_values(ibv_context* context, ibv_values_ex* values) {
  Context* ctx = to_context(context);
  if (!live(ctx)) return EIO;
  if (values->comp_mask & ~uint32_t(IBV_VALUES_MASK_RAW_CLOCK)) return EINVAL;
  uint32_t filled = 0;
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
    const softrdma::engine::Nanos now = ctx->device->clock().now();
    values->raw_clock.tv_sec = now / 1'000'000'000;
    values->raw_clock.tv_nsec = now % 1'000'000'000;
    filled |= IBV_VALUES_MASK_RAW_CLOCK;
  }
  values->comp_mask = filled;
  return 0;
}

}  // namespace softrdma::verbs

SOFTRDMA_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  return guard_errno([&] {
    Context* ctx = to_context(context);  // readable in a forked child (query_device_ex)
    fill_device_attr(*ctx, *attr);
    return 0;
  });
}

SOFTRDMA_EXPORT int ibv_query_port(ibv_context* context, uint8_t port_num,
                                   _compat_ibv_port_attr* attr) {
  return op_query_port(context, port_num, reinterpret_cast<ibv_port_attr*>(attr),
                       sizeof *attr);
}

// ibv_query_gid(3): 0 or -1 (not an errno).
SOFTRDMA_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port_num, int index,
                                  ibv_gid* gid) {
  return guard_minus1([&] {
    ibv_gid_entry entry;
    const int err = index < 0 || !live(to_context(context))
                        ? EINVAL
                        : gid_entry(to_context(context), port_num, uint32_t(index), entry);
    if (err == ENODATA) {  // an empty slot reads as the zero GID, as from sysfs
      *gid = ibv_gid{};
      return 0;
    }
    if (err != 0) {
      errno = EINVAL;
      return -1;
    }
    *gid = entry.gid;
    return 0;
  });
}

// ibv_query_gid_ex(3): an errno; no flags are defined yet.
SOFTRDMA_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num,
                                      uint32_t gid_index, ibv_gid_entry* entry,
                                      uint32_t flags, size_t entry_size) {
  return guard_errno([&] {
    if (flags != 0) return EOPNOTSUPP;
    if (!live(to_context(context))) return EIO;
    ibv_gid_entry full;
    if (int err = gid_entry(to_context(context), port_num, gid_index, full)) return err;
    std::memcpy(entry, &full, std::min(entry_size, sizeof full));
    return 0;
  });
}

// ibv_query_gid_table(3): the number of entries, or a negative errno; entries
// are entry_size apart (the caller's idea of the struct's size).
SOFTRDMA_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries,
                                             size_t max_entries, uint32_t flags,
                                             size_t entry_size) {
  try {
    Context* ctx = to_context(context);
    if (flags != 0) return -EOPNOTSUPP;
    if (!live(ctx)) return -EIO;
    const size_t count = ctx->device->gids().size();
    if (max_entries < count) return -EINVAL;
    auto* out = reinterpret_cast<uint8_t*>(entries);
    for (size_t i = 0; i < count; ++i) {
      ibv_gid_entry full;
      gid_entry(ctx, 1, uint32_t(i), full);
      std::memcpy(out + i * entry_size, &full, std::min(entry_size, sizeof full));
    }
    return ssize_t(count);
  } catch (...) {
    return -ENOMEM;
  }
}

// rdma-core's private helper (ibv_devinfo imports it): the sysfs GID type,
// 0 = IB/RoCE v1, 1 = RoCE v2 (abi/README.md §5). 0 or -1.
SOFTRDMA_EXPORT int ibv_query_gid_type(ibv_context* context, uint8_t port_num,
                                       unsigned int index, ibv_gid_type_sysfs* type) {
  return guard_minus1([&] {
    ibv_gid_entry entry;
    if (!live(to_context(context)) ||
        gid_entry(to_context(context), port_num, index, entry) != 0) {
      errno = EINVAL;
      return -1;
    }
    *type = IBV_GID_TYPE_SYSFS_ROCE_V2;
    return 0;
  });
}

// ibv_query_pkey(3): one entry, the default P_Key (IBA 10.9.1.2). 0 or -1.
SOFTRDMA_EXPORT int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index,
                                   __be16* pkey) {
  return guard_minus1([&] {
    Context* ctx = to_context(context);
    if (!live(ctx) || port_num != 1 || index != 0) {
      errno = EINVAL;
      return -1;
    }
    *pkey = htobe16(ctx->device->pkey());
    return 0;
  });
}
