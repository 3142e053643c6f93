// Device and port attributes as verbs reports them (ibv_query_device(3),
// ibv_query_port(3)), all read from the engine's DeviceLimits and GID table so
// that what is reported is what is enforced (engine/limits.h).
#pragma once

#include <infiniband/verbs.h>

#include <vector>

#include "transport/transport.h"
#include "verbs/objects.h"

namespace softrdma::verbs {

// Not Mellanox (0x02c9) nor Amazon (0x1d0f): perftest and pyverbs would call
// their vendor APIs (abi/README.md §2). Linux Soft-RoCE's neutral id.
inline constexpr uint32_t kVendorId = 0xffffff;
inline constexpr uint32_t kVendorPartId = 0;  // in none of perftest's device tables

// Slots in the port's GID table (gid_tbl_len): the engine's GIDs fill the first
// ones, the rest are empty, as on RoCE devices (whose tables hold addresses added
// later); docs/decisions/gid-table.md.
inline constexpr uint32_t kGidTableLength = 16;
// The device clock is the engine's (engine/clock.h): nanoseconds of
// CLOCK_MONOTONIC, which completion timestamps (ibv_wc_read_completion_ts) and
// ibv_query_rt_values_ex's raw clock read. hca_core_clock is in kHz: 1 GHz. The
// clock is a non-negative int64_t: 63 bits, which wrap after 292 years.
inline constexpr uint64_t kDeviceClockKhz = 1'000'000;
inline constexpr uint64_t kCompletionTimestampMask = (uint64_t(1) << 63) - 1;

// The node GUID, derived from the device's address: for IPv4 a.b.c.d the
// modified EUI-64 of the locally administered MAC 02:00:a:b:c:d
// (02:00:a:ff:fe:b:c:d); for IPv6 the address's interface identifier.
__be64 guid_of(const std::vector<transport::Gid>& gids);

void fill_device_attr(Context& ctx, ibv_device_attr& attr);
void limit_to_family(const engine::FamilyTraits& family, ibv_device_attr& attr);
void fill_device_attr_ex(Context& ctx, ibv_device_attr_ex& attr);
void fill_odp_caps(ibv_odp_caps& caps);
void fill_port_attr(Context& ctx, ibv_port_attr& attr);

}  // namespace softrdma::verbs
