// The software's side of `softrdma doctor`: softrdma's own libraries and device,
// the RoCEv2 address and port, the system's rdma-core, and the settings UCX and
// libfabric need to find softrdma's device.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "doctor/doctor.h"
#include "runtime/settings.h"
#include "samehost/host_registry.h"
#include "transport/udp/udp_socket.h"
#include "softrdma_version.h"

namespace softrdma::tools {
namespace {

namespace fs = std::filesystem;

constexpr uint16_t kRoceV2Port = 4791;  // IBA Annex A17, RoCEv2's UDP port

// Where Debian and others keep shared libraries; the system's own libibverbs and
// the UCX and libfabric libraries are looked for there.
const fs::path kLibraryDirs[] = {"/usr/lib/" SOFTRDMA_MULTIARCH, "/lib/" SOFTRDMA_MULTIARCH,
                                 "/usr/lib64", "/usr/lib", "/usr/local/lib"};

std::optional<fs::path> system_library(const std::string& name) {
  std::error_code ec;
  for (const fs::path& dir : kLibraryDirs)
    if (fs::exists(dir / name, ec)) return dir / name;
  return std::nullopt;
}

struct Interface {
  std::string name, address;
};

// Interfaces other than loopback that have an IPv4 or IPv6 address.
std::vector<Interface> addressed_interfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = family == AF_INET
                          ? static_cast<const void*>(&((sockaddr_in*)i->ifa_addr)->sin_addr)
                          : static_cast<const void*>(&((sockaddr_in6*)i->ifa_addr)->sin6_addr);
    inet_ntop(family, raw, text, sizeof text);
    if (family == AF_INET6 && std::strncmp(text, "fe80", 4) == 0) continue;  // link-local
    out.push_back({i->ifa_name, text});
  }
  freeifaddrs(list);
  return out;
}

std::string listed(const std::vector<Interface>& interfaces) {
  std::string out;
  for (const Interface& i : interfaces)
    out += (out.empty() ? "" : ", ") + i.address + " (" + i.name + ")";
  return out;
}

// Binds UDP `address`:4791 alone (never into a SO_REUSEPORT group, where it would
// be a member nobody steers to) and releases it: 0 or the errno.
int try_bind_roce_port(const std::string& address) {
  sockaddr_storage storage{};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(kRoceV2Port);
    length = sizeof *v4;
  } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(kRoceV2Port);
    length = sizeof *v6;
  } else {
    return EINVAL;
  }
  const int fd = socket(storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int rc = bind(fd, reinterpret_cast<sockaddr*>(&storage), length) == 0 ? 0 : errno;
  close(fd);
  return rc;
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    if (access((dirs.substr(start, end - start) + "/" + program).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

// UCX_TLS names transports to use ("^" first: to exclude); does it leave verbs in?
bool ucx_tls_allows_verbs(const std::string& tls) {
  if (tls.empty() || tls[0] == '^') return true;
  for (const char* name : {"all", "rc", "rc_v", "rc_verbs", "ud", "ud_v", "ud_verbs"}) {
    const std::string token = name;
    for (size_t at = tls.find(token); at != std::string::npos; at = tls.find(token, at + 1)) {
      const size_t end = at + token.size();
      if ((at == 0 || tls[at - 1] == ',') && (end == tls.size() || tls[end] == ',')) return true;
    }
  }
  return false;
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

}  // namespace

Finding check_device(const fs::path& library_dir, std::optional<DeviceSnapshot>& snapshot) {
  Finding f{"device", Verdict::kProblem, "", ""};
  for (const char* library : {"libibverbs.so.1", "librdmacm.so.1"}) {
    if (fs::exists(library_dir / library)) continue;
    f.found = library_dir.string() + " has no " + library;
    f.advice = "build the project (scripts/demo.sh) or reinstall the package";
    return f;
  }
  std::string error;
  snapshot = query_device(library_dir / "libibverbs.so.1", error);
  if (!snapshot) {
    f.found = "the device does not open: " + error;
    f.advice = "see the address finding below and docs/configuration.md";
    return f;
  }
  const bool iwarp = snapshot->transport_type == IBV_TRANSPORT_IWARP;
  f.verdict = Verdict::kOk;
  f.found = snapshot->name + " opens (" + (iwarp ? "iWARP over TCP" : "RoCEv2 over UDP") +
            ", fw_ver \"" + snapshot->fw_ver + "\") from " + library_dir.string();
  if (snapshot->fw_ver != std::string("softrdma ") + kVersion) {
    f.verdict = Verdict::kNote;
    f.advice = std::string("the library is not this command's version (softrdma ") + kVersion +
               "): install them together";
  }
  return f;
}

Finding check_address() {
  Finding f{"address", Verdict::kOk, "", ""};
  std::string error;
  const auto settings = runtime::Settings::from_environment(error);
  if (!settings) {
    f.verdict = Verdict::kProblem;
    f.found = error;
    f.advice = "fix the setting (docs/configuration.md)";
    return f;
  }
  const std::vector<Interface> interfaces = addressed_interfaces();
  if (settings->address.empty() && !settings->share_address) {
    f.found = "SOFTRDMA_ADDR is unset and SOFTRDMA_SHARE_ADDRESS=0: each process takes a "
              "loopback address of its own, so only processes of this host reach it";
    if (!interfaces.empty())
      f.found += "; to reach other hosts, unset SOFTRDMA_SHARE_ADDRESS or set SOFTRDMA_ADDR to "
                 "one of " + listed(interfaces);
    return f;
  }
  const bool defaulted = settings->address.empty();
  const std::string address = defaulted ? runtime::Settings::host_address() : settings->address;
  const std::string named = defaulted ? "the host's address " + address + " (SOFTRDMA_ADDR unset)"
                                      : "SOFTRDMA_ADDR " + address;
  if (settings->iwarp) {
    f.found = named + ": iWARP holds no UDP port; any number of processes share the address "
              "(docs/decisions/host-rnic.md)";
    return f;
  }
  // Shared: the address's registry says how many of this user's processes serve it,
  // read without joining. A bind that tried would put a socket into their group for
  // an instant, where the kernel could hash a packet to it (lost) and a process
  // opening its device would meet a member it does not know (host-rnic.md).
  const std::optional<wire::Gid> gid = transport::udp::parse_address(address);
  const int serving = settings->share_address && gid
                          ? samehost::HostRegistry::live_processes(*gid) : 0;
  if (serving > 0) {
    f.found = named + ": shared by " + std::to_string(serving) + " process" +
              (serving == 1 ? "" : "es") + " of this user, which this one's would join; "
              "they reach each other by the same-host path, other hosts reach them at this "
              "address";
    return f;
  }
  const int rc = try_bind_roce_port(address);
  if (rc == 0) {
    f.found = named + (settings->share_address
                           ? ": UDP port 4791 is free there and can be shared by this user's "
                             "processes; they reach each other by the same-host path, other "
                             "hosts reach them at this address"
                           : ": UDP port 4791 is free there");
    return f;
  }
  f.verdict = Verdict::kProblem;
  f.found = named + ": cannot bind UDP port 4791 (" + std::strerror(rc) + ")";
  if (rc == EADDRINUSE && defaulted) {
    f.verdict = Verdict::kNote;
    f.advice = "another user's processes or a kernel RoCE device hold it (`ss -ulpn sport = "
               ":4791`): this user's processes each take a loopback address of their own, "
               "which other hosts cannot reach; only one user's processes share an address";
  } else if (rc == EADDRINUSE) {
    f.advice = settings->share_address
                   ? "another user's process or a kernel RoCE device holds it: `ss -ulpn sport "
                     "= :4791`; only one user's processes share an address"
                   : "another process holds it (another softrdma process with this address, or "
                     "a kernel RoCE device): `ss -ulpn sport = :4791`; unset "
                     "SOFTRDMA_SHARE_ADDRESS=0 in every softrdma process of the address, or "
                     "give each its own address";
  } else if (rc == EADDRNOTAVAIL) {
    f.advice = "it is not an address of this host; use one of: " +
               (interfaces.empty() ? std::string("(none but loopback)") : listed(interfaces));
  }
  return f;
}

Finding check_rdma_core() {
  Finding f{"rdma-core", Verdict::kOk, "", ""};
  std::string tools;
  for (const char* tool : {"ibv_devinfo", "rping", "ib_write_bw"})
    if (on_path(tool)) tools += std::string(tools.empty() ? "" : ", ") + tool;
  const std::string tool_text = tools.empty() ? "none of ibv_devinfo, rping, ib_write_bw on PATH"
                                              : "on PATH: " + tools;
  const auto system = system_library("libibverbs.so.1");
  if (!system) {
    f.verdict = Verdict::kNote;
    f.found = "no system libibverbs (softrdma brings its own); " + tool_text;
    f.advice = "for rdma-core's tools: apt-get install ibverbs-utils rdmacm-utils perftest";
    return f;
  }
  // libibverbs.so.1.<ABI minor>.<rdma-core release>.0 (rdma-core's file name).
  std::error_code ec;
  const std::string real = fs::canonical(*system, ec).filename().string();
  unsigned minor = 0, release = 0;
  const bool parsed = std::sscanf(real.c_str(), "libibverbs.so.1.%u.%u", &minor, &release) == 2;
  f.found = "system libibverbs " + real + (parsed ? " (rdma-core " + std::to_string(release) + ")" : "") +
            "; softrdma's exports up to IBVERBS_1." + std::to_string(kIbverbsAbiMinor) + "; " +
            tool_text;
  if (parsed && int(minor) > kIbverbsAbiMinor) {
    f.verdict = Verdict::kNote;
    f.advice = "programs built against this rdma-core may use IBVERBS_1." + std::to_string(minor) +
               " symbols softrdma lacks; such a program fails to start with \"version "
               "IBVERBS_1." + std::to_string(minor) + " not found\"";
  }
  return f;
}

Finding check_ucx() {
  Finding f{"UCX", Verdict::kOk, "", ""};
  if (!system_library("libucp.so.0")) {
    f.found = "not installed (nothing to set)";
    return f;
  }
  f.found = "installed: run its programs with `softrdma run` (UCX finds devices through "
            "sysfs); UCX_NET_DEVICES=softrdma0:1 keeps it on softrdma's port; client/server "
            "programs: UCX_SOCKADDR_TLS_PRIORITY=rdmacm";
  const std::string tls = environment("UCX_TLS");
  const std::string devices = environment("UCX_NET_DEVICES");
  if (!ucx_tls_allows_verbs(tls)) {
    f.verdict = Verdict::kNote;
    f.advice = "UCX_TLS=" + tls + " leaves out the verbs transports: use rc_verbs,ud_verbs";
  } else if (!devices.empty() && devices.find("softrdma") == std::string::npos &&
             devices.find("softiwarp") == std::string::npos && devices != "all") {
    f.verdict = Verdict::kNote;
    f.advice = "UCX_NET_DEVICES=" + devices + " leaves out softrdma0:1";
  }
  return f;
}

Finding check_libfabric() {
  Finding f{"libfabric", Verdict::kOk, "", ""};
  if (!system_library("libfabric.so.1")) {
    f.found = "not installed (nothing to set)";
    return f;
  }
  // The verbs provider finds a device's address by binding to the addresses of the
  // interfaces FI_VERBS_IFACE names, never loopback (docs/configuration.md).
  const std::vector<Interface> interfaces = addressed_interfaces();
  const std::string iface = environment("FI_VERBS_IFACE");
  const std::string provider = environment("FI_PROVIDER");
  f.found = "installed";
  if (interfaces.empty()) {
    f.verdict = Verdict::kNote;
    f.found += ", but no interface besides loopback has an address: its verbs provider "
               "cannot find softrdma's device";
    f.advice = "give an interface an address (any interface serves), then FI_VERBS_IFACE=<it>";
  } else if (iface.empty()) {
    f.verdict = Verdict::kNote;
    f.found += "; its verbs provider needs FI_VERBS_IFACE";
    f.advice = "FI_VERBS_IFACE=" + interfaces.front().name;
  } else {
    f.found += "; FI_VERBS_IFACE=" + iface;
    bool named = false;  // the provider takes the interfaces whose names begin so
    for (const Interface& i : interfaces) named = named || i.name.rfind(iface, 0) == 0;
    if (!named) {
      f.verdict = Verdict::kNote;
      f.advice = "no interface with an address is named " + iface + "*: use one of " +
                 listed(interfaces);
    }
  }
  if (!provider.empty() && provider.find("verbs") == std::string::npos) {
    f.verdict = Verdict::kNote;
    f.advice = "FI_PROVIDER=" + provider + " leaves out verbs: use verbs or verbs,ofi_rxm";
  }
  return f;
}

}  // namespace softrdma::tools
