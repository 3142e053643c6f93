// The files of the sysfs view, in the formats of Linux's RDMA core
// (drivers/infiniband/core/sysfs.c), from a device snapshot.
#include "run/sysfs_files.h"

#include <endian.h>
#include <gtest/gtest.h>

#include <map>

namespace softrdma::tools {
namespace {

DeviceSnapshot softrdma_like() {
  DeviceSnapshot d;
  d.name = "softrdma0";
  d.dev_name = "uverbs0";
  d.node_type = IBV_NODE_CA;
  d.node_guid = htobe64(0x02007ffffe0036c1ull);
  d.sys_image_guid = d.node_guid;
  d.fw_ver = "softrdma 0.1.0";
  d.port.state = IBV_PORT_ACTIVE;
  d.port.phys_state = 5;
  d.port.link_layer = IBV_LINK_LAYER_ETHERNET;
  d.port.port_cap_flags = IBV_PORT_IP_BASED_GIDS;
  d.port.active_width = 1;
  d.port.active_speed = 1;
  ibv_gid v4{};
  v4.raw[10] = v4.raw[11] = 0xff;
  v4.raw[12] = 127;
  v4.raw[15] = 1;
  ibv_gid link_local{};
  link_local.raw[0] = 0xfe;
  link_local.raw[1] = 0x80;
  link_local.raw[15] = 2;
  d.gids = {{link_local, IBV_GID_TYPE_ROCE_V2, "eth0"}, {v4, IBV_GID_TYPE_ROCE_V2, ""}};
  d.pkeys = {0xffff};
  return d;
}

std::map<std::string, std::string> by_path(const std::vector<ViewFile>& files) {
  std::map<std::string, std::string> out;
  for (const ViewFile& f : files) out[f.path] = f.contents;
  return out;
}

// Each file where the kernel has it, with the kernel's wording.
TEST(SysfsFiles, KernelFormats) {
  const auto files = by_path(class_files(softrdma_like()));
  const std::string port = "infiniband/softrdma0/ports/1/";
  EXPECT_EQ(files.at("infiniband/softrdma0/node_type"), "1: CA\n");
  EXPECT_EQ(files.at("infiniband/softrdma0/node_guid"), "0200:7fff:fe00:36c1\n");
  EXPECT_EQ(files.at("infiniband/softrdma0/fw_ver"), "softrdma 0.1.0\n");
  EXPECT_EQ(files.at("infiniband_verbs/uverbs0/ibdev"), "softrdma0\n");
  EXPECT_EQ(files.at(port + "state"), "4: ACTIVE\n");
  EXPECT_EQ(files.at(port + "phys_state"), "5: LinkUp\n");
  EXPECT_EQ(files.at(port + "link_layer"), "Ethernet\n");
  EXPECT_EQ(files.at(port + "lid"), "0x0\n");
  EXPECT_EQ(files.at(port + "cap_mask"), "0x04000000\n");
  EXPECT_EQ(files.at(port + "rate"), "2.5 Gb/sec (1X SDR)\n");
  EXPECT_EQ(files.at(port + "pkeys/0"), "0xffff\n");
}

// One gids/types entry per GID; ndevs only where an interface holds the address
// (the kernel's ndevs file answers ENODEV otherwise).
TEST(SysfsFiles, GidTableWithTypesAndInterfaces) {
  const auto files = by_path(class_files(softrdma_like()));
  const std::string port = "infiniband/softrdma0/ports/1/";
  EXPECT_EQ(files.at(port + "gids/0"), "fe80:0000:0000:0000:0000:0000:0000:0002\n");
  EXPECT_EQ(files.at(port + "gids/1"), "0000:0000:0000:0000:0000:ffff:7f00:0001\n");
  EXPECT_EQ(files.at(port + "gid_attrs/types/0"), "RoCE v2\n");
  EXPECT_EQ(files.at(port + "gid_attrs/types/1"), "RoCE v2\n");
  EXPECT_EQ(files.at(port + "gid_attrs/ndevs/0"), "eth0\n");
  EXPECT_EQ(files.count(port + "gid_attrs/ndevs/1"), 0u);
  EXPECT_EQ(files.count(port + "gids/2"), 0u);
}

// A RoCE v1 GID and a faster, wider link, as a kernel RoCE device would show them.
TEST(SysfsFiles, OtherTypesAndRates) {
  DeviceSnapshot d = softrdma_like();
  d.gids[0].type = IBV_GID_TYPE_ROCE_V1;
  d.port.active_speed = 32;  // EDR
  d.port.active_width = 2;   // 4X
  const auto files = by_path(class_files(d));
  EXPECT_EQ(files.at("infiniband/softrdma0/ports/1/gid_attrs/types/0"), "IB/RoCE v1\n");
  EXPECT_EQ(files.at("infiniband/softrdma0/ports/1/rate"), "100 Gb/sec (4X EDR)\n");
}

// Only the two replaced classes are written into.
TEST(SysfsFiles, EveryFileIsInAReplacedClass) {
  for (const ViewFile& f : class_files(softrdma_like())) {
    const std::string top = f.path.substr(0, f.path.find('/'));
    EXPECT_TRUE(top == "infiniband" || top == "infiniband_verbs") << f.path;
  }
}

}  // namespace
}  // namespace softrdma::tools
