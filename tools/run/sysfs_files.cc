#include "run/sysfs_files.h"

#include <endian.h>
#include <net/if.h>

#include <algorithm>

#include <cstdio>
#include <cstring>

namespace softrdma::tools {

namespace {

std::string format(const char* fmt, auto... args) {
  char text[128];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

// IBA 14.2.5.6 PortInfo PortState, as the kernel names it.
std::string state_text(ibv_port_state state) {
  static const char* const names[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  const unsigned s = unsigned(state);
  return format("%u: %s\n", s, s < std::size(names) ? names[s] : "<unknown>");
}

// IBA 14.2.5.6 PortInfo PortPhysicalState.
std::string phys_state_text(uint8_t state) {
  static const char* const names[] = {"<unknown>", "Sleep",     "Polling",
                                      "Disabled",  "PortConfigurationTraining",
                                      "LinkUp",    "LinkErrorRecovery", "Phy Test"};
  return format("%u: %s\n", unsigned(state), state < std::size(names) ? names[state] : "<unknown>");
}

std::string link_layer_text(uint8_t link_layer) {
  switch (link_layer) {
    case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand\n";
    case IBV_LINK_LAYER_ETHERNET: return "Ethernet\n";
    default: return "Unknown\n";
  }
}

// IBA 14.2.5.6 LinkSpeedActive / LinkWidthActive, printed as the kernel's
// rate_show does: the lane rate in tenths of Gb/s times the lanes.
std::string rate_text(uint8_t speed, uint8_t width) {
  struct Speed { uint8_t code; int tenths; const char* name; };
  static const Speed speeds[] = {{2, 50, "DDR"},   {4, 100, "QDR"},  {8, 100, "FDR10"},
                                 {16, 140, "FDR"}, {32, 250, "EDR"}, {64, 500, "HDR"},
                                 {128, 1000, "NDR"}};
  Speed chosen{1, 25, "SDR"};  // SDR, also for an unknown code (as the kernel does)
  for (const Speed& s : speeds)
    if (s.code == speed) chosen = s;
  int lanes = 1;
  switch (width) {
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: break;
  }
  const int rate = chosen.tenths * lanes;
  return format("%d%s Gb/sec (%dX %s)\n", rate / 10, rate % 10 ? ".5" : "", lanes, chosen.name);
}

std::string node_type_text(ibv_node_type type) {
  switch (type) {
    case IBV_NODE_CA: return "1: CA\n";
    case IBV_NODE_SWITCH: return "2: switch\n";
    case IBV_NODE_ROUTER: return "3: router\n";
    case IBV_NODE_RNIC: return "4: RNIC\n";
    default: return format("%d: <unknown>\n", int(type));
  }
}

// A GUID in network byte order as four groups of 16 bits.
std::string guid_text(uint64_t guid_be) {
  const uint64_t g = be64toh(guid_be);
  return format("%04x:%04x:%04x:%04x\n", unsigned(g >> 48), unsigned(g >> 32) & 0xffff,
                unsigned(g >> 16) & 0xffff, unsigned(g) & 0xffff);
}

// What the kernel's gid_attrs/types shows (ib_cache_gid_type_str).
std::string gid_type_text(ibv_gid_type type) {
  return type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2\n" : "IB/RoCE v1\n";
}

void add_port_files(const DeviceSnapshot& d, std::vector<ViewFile>& out) {
  const std::string port =
      "infiniband/" + d.name + "/ports/" + std::to_string(unsigned(d.port_num)) + "/";
  const ibv_port_attr& a = d.port;
  out.push_back({port + "state", state_text(a.state)});
  out.push_back({port + "phys_state", phys_state_text(a.phys_state)});
  out.push_back({port + "link_layer", link_layer_text(a.link_layer)});
  out.push_back({port + "lid", format("0x%x\n", unsigned(a.lid))});
  out.push_back({port + "lid_mask_count", format("%u\n", unsigned(a.lmc))});
  out.push_back({port + "sm_lid", format("0x%x\n", unsigned(a.sm_lid))});
  out.push_back({port + "sm_sl", format("%u\n", unsigned(a.sm_sl))});
  out.push_back({port + "cap_mask", format("0x%08x\n", a.port_cap_flags)});
  out.push_back({port + "rate", rate_text(a.active_speed, a.active_width)});
  for (size_t i = 0; i < d.gids.size(); ++i) {
    const std::string index = std::to_string(i);
    out.push_back({port + "gids/" + index, gid_text(d.gids[i].gid) + "\n"});
    out.push_back({port + "gid_attrs/types/" + index, gid_type_text(d.gids[i].type)});
    // A GID no interface holds has no ndevs entry (the kernel answers ENODEV).
    if (!d.gids[i].netdev.empty())
      out.push_back({port + "gid_attrs/ndevs/" + index, d.gids[i].netdev + "\n"});
  }
  for (size_t i = 0; i < d.pkeys.size(); ++i)
    out.push_back({port + "pkeys/" + std::to_string(i), format("0x%04x\n", unsigned(d.pkeys[i]))});
}

}  // namespace

std::string gid_text(const ibv_gid& gid) {
  std::string text;
  for (int i = 0; i < 16; i += 2) {
    if (i != 0) text += ':';
    text += format("%02x%02x", unsigned(gid.raw[i]), unsigned(gid.raw[i + 1]));
  }
  return text;
}

std::vector<ViewFile> class_files(const DeviceSnapshot& d) {
  const std::string device = "infiniband/" + d.name + "/";
  std::vector<ViewFile> out = {
      {device + "node_type", node_type_text(d.node_type)},
      {device + "node_guid", guid_text(d.node_guid)},
      {device + "sys_image_guid", guid_text(d.sys_image_guid)},
      {device + "fw_ver", d.fw_ver + "\n"},
      {"infiniband_verbs/" + d.dev_name + "/ibdev", d.name + "\n"},
  };
  add_port_files(d, out);
  // The interfaces the GIDs live on, as device/net/<ifname> (the kernel's
  // parent device links its netdev there): rdma-core's tests read the name from
  // it and the address from `ip addr show <ifname>` (pyverbs' rdma_cm tests).
  std::vector<std::string> listed;
  for (const GidRow& gid : d.gids) {
    if (gid.netdev.empty() || std::find(listed.begin(), listed.end(), gid.netdev) != listed.end())
      continue;
    listed.push_back(gid.netdev);
    const unsigned index = if_nametoindex(gid.netdev.c_str());
    out.push_back({device + "device/net/" + gid.netdev + "/ifindex", format("%u\n", index)});
  }
  return out;
}

}  // namespace softrdma::tools
