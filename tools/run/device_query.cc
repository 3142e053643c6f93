#include "run/device_query.h"

#include <dlfcn.h>
#include <endian.h>
#include <net/if.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace softrdma::tools {

namespace {

// The verbs the view is made of. ibv_query_port is a macro in <infiniband/verbs.h>;
// the symbol is rdma-core's compat entry, which fills the fields up to `flags`.
struct Verbs {
  decltype(&::ibv_get_device_list) get_device_list = nullptr;
  decltype(&::ibv_free_device_list) free_device_list = nullptr;
  decltype(&::ibv_get_device_name) get_device_name = nullptr;
  decltype(&::ibv_open_device) open_device = nullptr;
  decltype(&::ibv_close_device) close_device = nullptr;
  decltype(&::ibv_query_device) query_device = nullptr;
  int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*) = nullptr;
  decltype(&::_ibv_query_gid_ex) query_gid_ex = nullptr;
  decltype(&::ibv_query_pkey) query_pkey = nullptr;
};

template <typename Fn>
bool resolve(void* library, const char* symbol, Fn& out, std::string& error) {
  out = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (out == nullptr) error = std::string("the library lacks ") + symbol;
  return out != nullptr;
}

bool load(const std::filesystem::path& path, Verbs& v, std::string& error) {
  // Never closed: the library keeps a process-wide registry, and `softrdma run`
  // execs the program soon after anyway.
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    error = "cannot load " + path.string() + ": " + (why != nullptr ? why : "?");
    return false;
  }
  return resolve(library, "ibv_get_device_list", v.get_device_list, error) &&
         resolve(library, "ibv_free_device_list", v.free_device_list, error) &&
         resolve(library, "ibv_get_device_name", v.get_device_name, error) &&
         resolve(library, "ibv_open_device", v.open_device, error) &&
         resolve(library, "ibv_close_device", v.close_device, error) &&
         resolve(library, "ibv_query_device", v.query_device, error) &&
         resolve(library, "ibv_query_port", v.query_port, error) &&
         resolve(library, "_ibv_query_gid_ex", v.query_gid_ex, error) &&
         resolve(library, "ibv_query_pkey", v.query_pkey, error);
}

// The settings that only change what a device does, not what it reports, are
// unset while the question is asked and restored afterwards (the tool is still
// single-threaded here, so setenv is safe).
class QuietSettings {
 public:
  QuietSettings() {
    for (const char* name : {"SOFTRDMA_PCAP", "SOFTRDMA_FAULTS", "SOFTRDMA_PROGRESS"}) {
      const char* value = std::getenv(name);
      if (value == nullptr) continue;
      saved_.emplace_back(name, value);
      unsetenv(name);
    }
  }
  ~QuietSettings() {
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }
  QuietSettings(const QuietSettings&) = delete;
  QuietSettings& operator=(const QuietSettings&) = delete;

 private:
  std::vector<std::pair<std::string, std::string>> saved_;
};

bool query_tables(const Verbs& v, ibv_context* ctx, DeviceSnapshot& out, std::string& error) {
  ibv_device_attr attr{};
  if (int err = v.query_device(ctx, &attr)) {
    error = std::string("ibv_query_device: ") + std::strerror(err);
    return false;
  }
  out.node_guid = attr.node_guid;
  out.sys_image_guid = attr.sys_image_guid;
  out.fw_ver = attr.fw_ver;
  if (int err = v.query_port(ctx, out.port_num, &out.port)) {
    error = std::string("ibv_query_port: ") + std::strerror(err);
    return false;
  }
  for (int i = 0; i < out.port.gid_tbl_len; ++i) {
    ibv_gid_entry entry{};
    const int err = v.query_gid_ex(ctx, out.port_num, uint32_t(i), &entry, 0, sizeof entry);
    // ENODATA: an empty slot; the device fills its table from the first slot on
    // (docs/decisions/gid-table.md), so the rest are empty too: the view lists
    // the GIDs that exist, as sysfs has attributes for valid entries only.
    if (err == ENODATA) break;
    if (err != 0) {
      error = "ibv_query_gid_ex(" + std::to_string(i) + "): " + std::strerror(err);
      return false;
    }
    char ifname[IF_NAMESIZE] = {};
    GidRow row{entry.gid, ibv_gid_type(entry.gid_type), ""};
    if (entry.ndev_ifindex != 0 && if_indextoname(entry.ndev_ifindex, ifname) != nullptr)
      row.netdev = ifname;
    out.gids.push_back(row);
  }
  for (int i = 0; i < out.port.pkey_tbl_len; ++i) {
    __be16 pkey = 0;
    if (v.query_pkey(ctx, out.port_num, i, &pkey) != 0) {
      error = "ibv_query_pkey(" + std::to_string(i) + "): " + std::strerror(errno);
      return false;
    }
    out.pkeys.push_back(be16toh(pkey));
  }
  return true;
}

}  // namespace

std::optional<DeviceSnapshot> query_device(const std::filesystem::path& library,
                                           std::string& error) {
  Verbs v;
  if (!load(library, v, error)) return std::nullopt;
  QuietSettings quiet;
  int count = 0;
  ibv_device** list = v.get_device_list(&count);
  if (list == nullptr || count < 1) {
    if (list != nullptr) v.free_device_list(list);
    error = "no device listed (a malformed setting?)";
    return std::nullopt;
  }
  DeviceSnapshot out;
  ibv_device* device = list[0];
  out.name = v.get_device_name(device);
  out.dev_name = device->dev_name;
  out.node_type = device->node_type;
  out.transport_type = device->transport_type;
  ibv_context* ctx = v.open_device(device);
  const int open_errno = errno;
  bool ok = ctx != nullptr;
  if (!ok) error = "cannot open " + out.name + ": " + std::strerror(open_errno);
  if (ok) ok = query_tables(v, ctx, out, error);
  if (ctx != nullptr) v.close_device(ctx);
  v.free_device_list(list);
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace softrdma::tools
