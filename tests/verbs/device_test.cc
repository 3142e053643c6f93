// The device as verbs shows it: list, open, device/port attributes that match
// the engine's limits, size-tagged queries, GIDs, P_Key, strings.
#include <arpa/inet.h>
#include <endian.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <string>

#include "engine/limits.h"
#include "verbs/verbs_fixture.h"

// rdma-core's private GID-type query (ibv_devinfo imports it); not in the headers.
extern "C" int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                  int* type);
// rdma-core's sysfs helper (in <infiniband/driver.h>, which is not installed).
extern "C" int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);

namespace softrdma::verbs::testing {
namespace {

const engine::DeviceLimits kLimits;

// The one device is listed with what rdma-core clients read from ibv_device.
TEST(DeviceList, ListsOneSoftrdmaDevice) {
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(n, 1);
  EXPECT_EQ(list[1], nullptr);
  const char* expected = std::getenv("SOFTRDMA_DEVICE");
  EXPECT_STREQ(ibv_get_device_name(list[0]), expected != nullptr ? expected : "softrdma0");
  EXPECT_EQ(list[0]->node_type, IBV_NODE_CA);
  EXPECT_EQ(list[0]->transport_type, IBV_TRANSPORT_IB);
  EXPECT_EQ(std::string(list[0]->ibdev_path),
            std::string("/sys/class/infiniband/") + list[0]->name);
  EXPECT_EQ(ibv_get_device_index(list[0]), 0);
  ibv_free_device_list(list);
}

// The GUID ibv_devices prints is the node GUID the device reports.
TEST(DeviceList, GuidIsTheNodeGuid) {
  Device dev;
  ASSERT_NE(dev.ctx(), nullptr);
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(dev.ctx(), &attr), 0);
  EXPECT_NE(attr.node_guid, 0u);
  EXPECT_EQ(ibv_get_device_guid(dev.device()), attr.node_guid);
}

// Every limit reported is the engine's (engine/limits.h), and no vendor id that
// would make perftest or pyverbs call a vendor API.
TEST(DeviceAttributes, TellTheEngineLimits) {
  Device dev;
  ASSERT_NE(dev.ctx(), nullptr);
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(dev.ctx(), &a), 0);
  EXPECT_EQ(uint32_t(a.max_qp), kLimits.max_qp);
  EXPECT_EQ(uint32_t(a.max_qp_wr), kLimits.max_qp_wr);
  EXPECT_EQ(uint32_t(a.max_sge), kLimits.max_sge);
  EXPECT_EQ(uint32_t(a.max_cq), kLimits.max_cq);
  EXPECT_EQ(uint32_t(a.max_cqe), kLimits.max_cqe);
  EXPECT_EQ(uint32_t(a.max_pd), kLimits.max_pd);
  EXPECT_EQ(uint32_t(a.max_mr), kLimits.max_mr);
  EXPECT_EQ(a.max_mr_size, kLimits.max_mr_size);
  EXPECT_EQ(uint32_t(a.max_qp_rd_atom), kLimits.max_qp_rd_atom);
  EXPECT_EQ(uint32_t(a.max_qp_init_rd_atom), kLimits.max_qp_init_rd_atom);
  EXPECT_EQ(a.atomic_cap, IBV_ATOMIC_HCA);
  EXPECT_EQ(a.phys_port_cnt, 1);
  EXPECT_EQ(a.max_pkeys, 1);
  EXPECT_EQ(uint32_t(a.max_srq), kLimits.max_srq);
  EXPECT_EQ(uint32_t(a.max_srq_wr), kLimits.max_srq_wr);
  EXPECT_EQ(uint32_t(a.max_srq_sge), kLimits.max_srq_sge);
  EXPECT_EQ(uint32_t(a.max_ah), kLimits.max_ah);
  EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_XRC);
  EXPECT_FALSE(a.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
  EXPECT_NE(a.vendor_id, 0x02c9u);
  EXPECT_NE(a.vendor_id, 0x1d0fu);
}

TEST(PortAttributes, ActiveEthernetWithTheGidTable) {
  Device dev;
  ASSERT_NE(dev.ctx(), nullptr);
  ibv_port_attr p{};
  ASSERT_EQ(ibv_query_port(dev.ctx(), 1, &p), 0);
  EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(p.phys_state, 5);  // LinkUp
  EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(p.max_mtu, IBV_MTU_4096);
  EXPECT_EQ(p.gid_tbl_len, 16);
  EXPECT_EQ(p.pkey_tbl_len, 1);
  EXPECT_EQ(p.lid, 0);
  EXPECT_EQ(p.max_msg_sz, kLimits.max_msg_size);
  if (std::getenv("SOFTRDMA_ADDR") == nullptr) {
    EXPECT_EQ(p.active_mtu, IBV_MTU_4096);  // lo: 64 KiB
  }
  EXPECT_NE(ibv_query_port(dev.ctx(), 2, &p), 0);
}

// Size-tagged queries write no byte past the size the caller says it has: a
// binary built against older headers passes a shorter struct.
TEST(SizeTagged, QueryPortWritesOnlyTheGivenLength) {
  Device dev;
  ASSERT_NE(dev.ctx(), nullptr);
  verbs_context* vctx = verbs_get_ctx_op(dev.ctx(), query_port);
  ASSERT_NE(vctx, nullptr);
  unsigned char buf[sizeof(ibv_port_attr) + 16];
  std::memset(buf, 0xa5, sizeof buf);
  const size_t len = offsetof(ibv_port_attr, gid_tbl_len);
  ASSERT_EQ(vctx->query_port(dev.ctx(), 1, reinterpret_cast<ibv_port_attr*>(buf), len), 0);
  EXPECT_EQ(reinterpret_cast<ibv_port_attr*>(buf)->state, IBV_PORT_ACTIVE);
  for (size_t i = len; i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xa5) << "byte " << i;
}

// The exported ibv_query_port@IBVERBS_1.1 fills the old layout, which ends
// before port_cap_flags2.
TEST(SizeTagged, ExportedQueryPortFillsTheCompatLayout) {
  Device dev;
  ASSERT_NE(dev.ctx(), nullptr);
  unsigned char buf[sizeof(ibv_port_attr) + 16];
  std::memset(buf, 0xa5, sizeof buf);
  ASSERT_EQ((ibv_query_port)(dev.ctx(), 1, reinterpret_cast<_compat_ibv_port_attr*>(buf)), 0);
  EXPECT_EQ(reinterpret_cast<ibv_port_attr*>(buf)->link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(reinterpret_cast<ibv_port_attr*>(buf)->gid_tbl_len, 16);
  for (size_t i = offsetof(ibv_port_attr, port_cap_flags2); i < sizeof buf; ++i) {
    ASSERT_EQ(buf[i], 0xa5) << "byte " << i;
  }
}

TEST(SizeTagged, QueryDeviceExWritesOnlyTheGivenLength) {
  Device dev;
  ASSERT_NE(dev.ctx(), nullptr);
  verbs_context* vctx = verbs_get_ctx_op(dev.ctx(), query_device_ex);
  ASSERT_NE(vctx, nullptr);
  unsigned char buf[sizeof(ibv_device_attr_ex) + 16];
  std::memset(buf, 0xa5, sizeof buf);
  const size_t len = sizeof(ibv_device_attr);  // what ibv_query_device asks for
  auto* attr = reinterpret_cast<ibv_device_attr_ex*>(buf);
  ASSERT_EQ(vctx->query_device_ex(dev.ctx(), nullptr, attr, len), 0);
  EXPECT_EQ(attr->orig_attr.phys_port_cnt, 1);
  for (size_t i = len; i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xa5) << "byte " << i;
  EXPECT_EQ(vctx->query_device_ex(dev.ctx(), nullptr, attr, len - 1), EINVAL);
  ibv_device_attr_ex full{};
  ASSERT_EQ(ibv_query_device_ex(dev.ctx(), nullptr, &full), 0);
  EXPECT_EQ(full.orig_attr.max_qp, attr->orig_attr.max_qp);
}

// The GID table on the default loopback address (docs/decisions/gid-table.md): the
// process's 127.x.y.z has no IPv6 link-local twin, so both index 0 (what rdma-core's
// tests pick) and index 1 (what users type, Soft-RoCE's IPv4 entry) are the
// IPv4-mapped GID, an address every local RoCEv2 peer reaches; both RoCE v2.
TEST(Gids, LoopbackTableIsTheIpv4MappedGidTwice) {
  Device dev;
  ASSERT_NE(dev.ctx(), nullptr);
  ibv_gid g0{}, g1{}, g2{};
  ASSERT_EQ(ibv_query_gid(dev.ctx(), 1, 0, &g0), 0);
  ASSERT_EQ(ibv_query_gid(dev.ctx(), 1, 1, &g1), 0);
  const uint8_t mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  EXPECT_EQ(std::memcmp(g1.raw, mapped_prefix, 12), 0);
  EXPECT_EQ(std::memcmp(g0.raw, g1.raw, 16), 0);
  EXPECT_EQ(g1.raw[12], 127);
  std::memset(g2.raw, 0xee, 16);
  EXPECT_EQ(ibv_query_gid(dev.ctx(), 1, 2, &g2), 0) << "an empty slot reads as zeros";
  EXPECT_EQ(std::count(std::begin(g2.raw), std::end(g2.raw), 0), 16);
  EXPECT_EQ(ibv_query_gid(dev.ctx(), 1, 16, &g2), -1) << "beyond gid_tbl_len";
  int type = -1;
  ASSERT_EQ(ibv_query_gid_type(dev.ctx(), 1, 1, &type), 0);
  EXPECT_EQ(type, 1);  // sysfs enum: RoCE v2
  ASSERT_EQ(ibv_query_gid_type(dev.ctx(), 1, 0, &type), 0);
  EXPECT_EQ(type, 1);
}

TEST(Gids, QueryGidExAndTable) {
  Device dev;
  ASSERT_NE(dev.ctx(), nullptr);
  ibv_gid_entry e{};
  ASSERT_EQ(ibv_query_gid_ex(dev.ctx(), 1, 1, &e, 0), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(e.gid_index, 1u);
  EXPECT_EQ(e.port_num, 1u);
  EXPECT_NE(e.ndev_ifindex, 0u);
  EXPECT_EQ(ibv_query_gid_ex(dev.ctx(), 1, 7, &e, 0), ENODATA) << "an empty slot";
  EXPECT_EQ(ibv_query_gid_ex(dev.ctx(), 1, 16, &e, 0), EINVAL) << "beyond gid_tbl_len";
  EXPECT_EQ(ibv_query_gid_ex(dev.ctx(), 1, 0, &e, 1), EOPNOTSUPP);
  ibv_gid_entry table[4]{};
  ASSERT_EQ(ibv_query_gid_table(dev.ctx(), table, 4, 0), 2);
  EXPECT_EQ(table[0].gid_index, 0u);
  EXPECT_EQ(table[1].gid_index, 1u);
  EXPECT_EQ(ibv_query_gid_table(dev.ctx(), table, 1, 0), -EINVAL);
}

TEST(Pkeys, OneDefaultEntry) {
  Device dev;
  ASSERT_NE(dev.ctx(), nullptr);
  __be16 pkey = 0;
  ASSERT_EQ(ibv_query_pkey(dev.ctx(), 1, 0, &pkey), 0);
  EXPECT_EQ(be16toh(pkey), 0xffff);
  EXPECT_EQ(ibv_query_pkey(dev.ctx(), 1, 1, &pkey), -1);
  EXPECT_EQ(ibv_get_pkey_index(dev.ctx(), 1, htobe16(0xffff)), 0);
}

// The context carries what clients read directly (abi/README.md §8).
TEST(Context, PublicFields) {
  Device dev;
  ASSERT_NE(dev.ctx(), nullptr);
  EXPECT_EQ(dev.ctx()->device, dev.device());
  EXPECT_GE(dev.ctx()->async_fd, 0);
  EXPECT_EQ(dev.ctx()->num_comp_vectors, 1);
  EXPECT_NE(dev.ctx()->ops.poll_cq, nullptr);
  EXPECT_NE(dev.ctx()->ops.post_send, nullptr);
  EXPECT_NE(dev.ctx()->ops.post_srq_recv, nullptr);
}

// ibv_context.cmd_fd is a real descriptor that can be duplicated; ibv_import_device(3)
// on a dup gives another context on the device, where ibv_import_pd(3) and
// ibv_import_mr(3) reach the original's objects by handle (pyverbs' shared-PD
// test). A descriptor of no context is EOPNOTSUPP; an unknown handle EINVAL.
TEST(Context, ImportThroughADupOfTheCommandFd) {
  Device dev;
  ASSERT_NE(dev.ctx(), nullptr);
  const int fd = dev.ctx()->cmd_fd;
  ASSERT_GE(fd, 0);
  EXPECT_NE(fd, dev.ctx()->async_fd);
  errno = 0;
  EXPECT_EQ(ibv_import_device(dev.ctx()->async_fd), nullptr) << "not a context's cmd_fd";
  EXPECT_EQ(errno, EOPNOTSUPP);
  const int copy = dup(fd);
  ASSERT_GE(copy, 0) << "dup(cmd_fd): errno " << errno;
  ibv_context* imported = ibv_import_device(copy);  // owns `copy` from here
  ASSERT_NE(imported, nullptr) << errno;
  EXPECT_EQ(imported->device, dev.ctx()->device);

  ibv_pd* pd = ibv_alloc_pd(dev.ctx());
  std::vector<uint8_t> buf(4096, 0x5a);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(pd != nullptr && mr != nullptr);
  ibv_pd* pd2 = ibv_import_pd(imported, pd->handle);
  ASSERT_NE(pd2, nullptr) << errno;
  EXPECT_EQ(pd2->context, imported);
  ibv_mr* mr2 = ibv_import_mr(pd2, mr->handle);
  ASSERT_NE(mr2, nullptr) << errno;
  EXPECT_EQ(mr2->addr, mr->addr);
  EXPECT_EQ(mr2->length, mr->length);
  EXPECT_EQ(mr2->lkey, mr->lkey);
  EXPECT_EQ(ibv_import_pd(imported, pd->handle + 1000), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_import_mr(pd2, mr->handle ^ 0xffff), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_unimport_mr(mr2);
  ibv_unimport_pd(pd2);
  EXPECT_EQ(ibv_dereg_mr(mr), 0) << "unimport left the MR";
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(imported), 0);
}

// Two contexts of one process share the device's address (one OpenDevice).
TEST(Context, TwoContextsShareTheAddress) {
  Device one, two;
  ASSERT_NE(one.ctx(), nullptr);
  ASSERT_NE(two.ctx(), nullptr);
  ibv_gid g1{}, g2{};
  ASSERT_EQ(ibv_query_gid(one.ctx(), 1, 1, &g1), 0);
  ASSERT_EQ(ibv_query_gid(two.ctx(), 1, 1, &g2), 0);
  EXPECT_EQ(std::memcmp(g1.raw, g2.raw, 16), 0);
}

TEST(Strings, AsRdmaCorePrintsThem) {
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR), "remote access error");
  EXPECT_STREQ(ibv_wc_status_str(ibv_wc_status(999)), "unknown");
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_CQ_ERR), "CQ error");
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_WQ_FATAL), "WQ fatal");
  EXPECT_STREQ(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter");
  EXPECT_STREQ(ibv_node_type_str(IBV_NODE_UNKNOWN), "unknown");
  EXPECT_STREQ(ibv_port_state_str(IBV_PORT_ACTIVE), "active");
  EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
  EXPECT_EQ(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
  EXPECT_EQ(ibv_rate_to_mbps(IBV_RATE_100_GBPS), 103125);
  EXPECT_EQ(mbps_to_ibv_rate(103125), IBV_RATE_100_GBPS);
  EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_14_GBPS), -1);
}

// ibv_read_sysfs_file reads dir/file as rdma-core's does: the trailing newline
// dropped, NUL-terminated; a missing file is -1 with ENOENT; contents that fill
// the buffer without a newline cannot be terminated: -1.
TEST(Sysfs, ReadSysfsFileReadsTheFile) {
  char dir[] = "/tmp/softrdma-sysfs-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/node_type";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("1: CA\n", f);
  std::fclose(f);
  char buf[16];
  EXPECT_EQ(ibv_read_sysfs_file(dir, "node_type", buf, sizeof buf), 5);
  EXPECT_STREQ(buf, "1: CA");
  char tight[5];  // "1: CA" without its newline fills it: cannot be terminated
  EXPECT_EQ(ibv_read_sysfs_file(dir, "node_type", tight, sizeof tight), -1);
  errno = 0;
  EXPECT_EQ(ibv_read_sysfs_file(dir, "board_id", buf, sizeof buf), -1);
  EXPECT_EQ(errno, ENOENT);
  unlink(path.c_str());
  rmdir(dir);
}

TEST(Fork, InitIsUnneeded) {
  EXPECT_EQ(ibv_fork_init(), 0);
  EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
}

}  // namespace
}  // namespace softrdma::verbs::testing
