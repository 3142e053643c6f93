// What the device tells a verbs program about itself, asked through the very
// library the program will load (`softrdma run`'s lib/libibverbs.so.1, opened
// with dlopen): the source of the sysfs view (sysfs_files.h), so that every file
// there says what ibv_query_port / ibv_query_gid_ex answer.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace softrdma::tools {

struct GidRow {
  ibv_gid gid{};
  ibv_gid_type type = IBV_GID_TYPE_IB;
  std::string netdev;  // the interface holding the GID's address ("" when none)
};

struct DeviceSnapshot {
  std::string name;      // ibv_get_device_name: softrdma0
  std::string dev_name;  // ibv_device::dev_name: the uverbs name (uverbs0)
  ibv_node_type node_type = IBV_NODE_UNKNOWN;
  ibv_transport_type transport_type = IBV_TRANSPORT_UNKNOWN;
  uint64_t node_guid = 0;       // network byte order, as ibv_device_attr has it
  uint64_t sys_image_guid = 0;  // network byte order
  std::string fw_ver;
  uint8_t port_num = 1;
  ibv_port_attr port{};  // the fields of rdma-core's ibv_query_port@IBVERBS_1.1
  std::vector<GidRow> gids;
  std::vector<uint16_t> pkeys;  // host byte order
};

// Opens the first device of `library` (a libibverbs.so.1), queries port 1, its
// GID and P_Key tables, and closes it again. The device is opened with the
// settings in the environment that decide what it reports (SOFTRDMA_DEVICE,
// SOFTRDMA_ADDR); capture, fault injection and inline progress are left off for
// the question, so nothing is written and no warning is printed twice.
std::optional<DeviceSnapshot> query_device(const std::filesystem::path& library,
                                           std::string& error);

}  // namespace softrdma::tools
