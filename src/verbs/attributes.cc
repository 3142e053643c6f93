#include "verbs/attributes.h"

#include <endian.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>

#include "engine/limits.h"
#include "softrdma_version.h"
#include "verbs/netdev.h"
#include "wire/ip_udp.h"
#include "wire/iwarp/mpa.h"

namespace softrdma::verbs {

namespace {

int clamp_int(uint64_t v) { return int(std::min<uint64_t>(v, INT_MAX)); }

}  // namespace

__be64 guid_of(const std::vector<transport::Gid>& gids) {
  if (gids.empty()) return 0;
  const transport::Gid& gid = gids.back();  // the address itself (index 1 for IPv4)
  uint8_t eui[8];
  if (wire::gid_is_ipv4(gid)) {
    const uint8_t mac[6] = {0x02, 0x00, gid[12], gid[13], gid[14], gid[15]};
    // RFC 4291 appendix A: EUI-48 -> modified EUI-64 (ff:fe in the middle).
    const uint8_t bytes[8] = {mac[0], mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
    std::memcpy(eui, bytes, 8);
  } else {
    std::memcpy(eui, gid.data() + 8, 8);
  }
  uint64_t guid;
  std::memcpy(&guid, eui, 8);  // already in network order
  return guid;
}

void fill_device_attr(Context& ctx, ibv_device_attr& a) {
  const engine::DeviceLimits& lim = ctx.device->limits();
  a = ibv_device_attr{};
  std::snprintf(a.fw_ver, sizeof a.fw_ver, "softrdma %s", softrdma::kVersion);
  a.node_guid = guid_of(ctx.device->gids());
  a.sys_image_guid = a.node_guid;
  a.max_mr_size = lim.max_mr_size;
  a.page_size_cap = 0xfffff000;  // any multiple of 4 KiB: memory is the host's
  a.vendor_id = kVendorId;
  a.vendor_part_id = kVendorPartId;
  a.max_qp = clamp_int(lim.max_qp);
  a.max_qp_wr = clamp_int(lim.max_qp_wr);
  // RNR NAKs are generated (IBA 9.7.5.2.8); cur_qp_state is checked by modify_qp;
  // sys_image_guid is reported; XRC domains, SRQs and QPs exist (IBA A14). SRQs
  // cannot be resized (no IBV_DEVICE_SRQ_RESIZE). Memory windows of type 1 and 2B
  // (bound to a QP, IBA 10.6.7.2.2), not 2A.
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_CURR_QP_STATE_MOD |
                       IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_XRC | IBV_DEVICE_MEM_WINDOW |
                       IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  a.max_sge = clamp_int(lim.max_sge);
  a.max_sge_rd = clamp_int(lim.max_sge);
  a.max_cq = clamp_int(lim.max_cq);
  a.max_cqe = clamp_int(lim.max_cqe);
  a.max_mr = clamp_int(lim.max_mr);
  a.max_pd = clamp_int(lim.max_pd);
  a.max_mw = clamp_int(lim.max_mw);
  a.max_qp_rd_atom = clamp_int(lim.max_qp_rd_atom);
  a.max_qp_init_rd_atom = clamp_int(lim.max_qp_init_rd_atom);
  // Responder resources are per QP only; the device-wide total is their product.
  a.max_res_rd_atom = clamp_int(uint64_t(lim.max_qp) * lim.max_qp_rd_atom);
  // The responder executes atomics with std::atomic_ref on the target word: atomic
  // with respect to every other RDMA atomic of this device, across QPs (IBA
  // 10.8.3.6, ATOMIC_HCA), and to the CPU's own atomic instructions on that word.
  a.atomic_cap = IBV_ATOMIC_HCA;
  a.max_ah = clamp_int(lim.max_ah);
  a.max_srq = clamp_int(lim.max_srq);
  a.max_srq_wr = clamp_int(lim.max_srq_wr);
  a.max_srq_sge = clamp_int(lim.max_srq_sge);
  // UD multicast (docs/decisions/multicast.md), within the limits the engine enforces.
  a.max_mcast_grp = clamp_int(lim.max_mcast_grp);
  a.max_mcast_qp_attach = clamp_int(lim.max_mcast_qp_attach);
  a.max_total_mcast_qp_attach = clamp_int(lim.max_total_mcast_qp_attach);
  a.max_pkeys = 1;
  // As Linux Soft-RoCE reports (and librdmacm folds into its timeouts): an upper
  // bound of the time a software responder may take to acknowledge.
  a.local_ca_ack_delay = 15;
  a.phys_port_cnt = 1;
  limit_to_family(ctx.device->family().traits(), a);
}

// What the port's family lacks (engine/family.h; iWARP's: docs/decisions/iwarp.md:
// RDMAP carries RC only, so no AHs or multicast and no XRC, has no RNR NAK, does
// not offer RFC 7306's atomics, and its READ depths are RFC 6581's 14-bit IRD/ORD).
void limit_to_family(const engine::FamilyTraits& family, ibv_device_attr& a) {
  if (!family.rnr_nak) a.device_cap_flags &= ~IBV_DEVICE_RC_RNR_NAK_GEN;
  if (!family.xrc) a.device_cap_flags &= ~IBV_DEVICE_XRC;
  if (!family.atomics) a.atomic_cap = IBV_ATOMIC_NONE;
  if (!family.carries(IBV_QPT_UD)) {  // no datagrams: no address handles, no groups
    a.max_ah = 0;
    a.max_mcast_grp = 0;
    a.max_mcast_qp_attach = 0;
    a.max_total_mcast_qp_attach = 0;
  }
  const int rd_atomic = int(std::min<uint32_t>(family.max_rd_atomic, INT_MAX));
  a.max_qp_rd_atom = std::min(a.max_qp_rd_atom, rd_atomic);
  a.max_qp_init_rd_atom = std::min(a.max_qp_init_rd_atom, rd_atomic);
}

void fill_device_attr_ex(Context& ctx, ibv_device_attr_ex& a) {
  a = ibv_device_attr_ex{};
  fill_device_attr(ctx, a.orig_attr);
  a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
  a.phys_port_cnt_ex = 1;
  // Completions carry the device clock's time when asked (ibv_create_cq_ex(3)).
  a.completion_timestamp_mask = kCompletionTimestampMask;
  a.hca_core_clock = kDeviceClockKhz;
  fill_odp_caps(a.odp_caps);
  a.xrc_odp_caps = a.odp_caps.per_transport_caps.rc_odp_caps;  // XRC: RC's operations
  a.max_dm_size = ctx.device->limits().max_dm_size;  // host memory the device owns (dm.cc)
  // Tag matching on RC (docs/decisions/tag-matching.md); TSO, RSS, packet pacing: none.
  const engine::DeviceLimits& lim = ctx.device->limits();
  // ODP for what the family carries only (iWARP: RC without atomics).
  const engine::FamilyTraits& family = ctx.device->family().traits();
  auto& per_transport = a.odp_caps.per_transport_caps;
  if (!family.atomics) per_transport.rc_odp_caps &= ~IBV_ODP_SUPPORT_ATOMIC;
  if (!family.carries(IBV_QPT_UC)) per_transport.uc_odp_caps = 0;
  if (!family.carries(IBV_QPT_UD)) per_transport.ud_odp_caps = 0;
  if (!family.xrc) a.xrc_odp_caps = 0;
  if (!family.tag_matching) return;
  a.tm_caps.flags = IBV_TM_CAP_RC;
  a.tm_caps.max_num_tags = lim.max_tm_tags;
  a.tm_caps.max_ops = lim.max_tm_ops;
  a.tm_caps.max_sge = lim.max_tm_sge;
  a.tm_caps.max_rndv_hdr_size = lim.max_rndv_hdr_size;
}

// On-demand paging (docs/decisions/odp.md): softrdma never pins; every access to
// registered memory resolves the page when it happens (the guarded copy), so
// every operation of every transport it serves works on ODP memory, and an
// implicit MR (the whole address space) is no different, and so are receives
// taken from an SRQ (RC's and XRC's).
void fill_odp_caps(ibv_odp_caps& caps) {
  caps = ibv_odp_caps{};
  caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
                                        IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                                        IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  // IBA Table 39: UC has SEND and RDMA WRITE, UD has SEND.
  caps.per_transport_caps.uc_odp_caps =
      IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE;
  caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
}

void fill_port_attr(Context& ctx, ibv_port_attr& a) {
  const engine::DeviceLimits& lim = ctx.device->limits();
  const Netdev netdev = netdev_of(ctx.device->transport().local_gid());
  a = ibv_port_attr{};
  a.state = IBV_PORT_ACTIVE;  // the socket is bound: the "link" is up
  a.max_mtu = IBV_MTU_4096;   // the engine segments at 256..4096
  a.active_mtu = active_mtu_for(netdev);
  a.gid_tbl_len = int(kGidTableLength);
  a.port_cap_flags = IBV_PORT_IP_BASED_GIDS;
  a.max_msg_sz = lim.max_msg_size;
  a.bad_pkey_cntr = uint32_t(ctx.device->counters().rx_bad_pkey.load(std::memory_order_relaxed));
  a.pkey_tbl_len = 1;
  a.lid = 0;  // RoCE: no LIDs (IBA A17.2)
  a.max_vl_num = 1;
  a.active_width = 1;   // 1X (IBA 14.2.5.6 PortInfo LinkWidthActive)
  a.active_speed = 1;  // SDR: a software device has no signalling rate to report
  a.phys_state = 5;    // LinkUp (IBA 14.2.5.6)
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
}

}  // namespace softrdma::verbs
