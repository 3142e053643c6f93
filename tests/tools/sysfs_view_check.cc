// Run under `softrdma run`: checks that the sysfs and /dev view the program was
// given says what the device answers this very process through verbs (the GIDs
// are per process: its own loopback address), that the original entries of
// /sys/class and /dev are still there, and prints PASS or each mismatch.
// Linked against the system's libibverbs like any client; `softrdma run` puts
// softrdma's first. Its formats are written out here again, independently of
// tools/run/sysfs_files.cc, from Linux's drivers/infiniband/core/sysfs.c.
#include <cerrno>
#include <endian.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace {

int failures = 0;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "<missing>";
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void expect_file(const std::string& path, const std::string& want) {
  const std::string got = read_file(path);
  if (got == want) return;
  ++failures;
  std::printf("MISMATCH %s: got \"%s\" want \"%s\"\n", path.c_str(), got.c_str(), want.c_str());
}

void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::printf("FAILED %s\n", what.c_str());
}

std::string hex(const char* fmt, unsigned long long value) {
  char text[64];
  std::snprintf(text, sizeof text, fmt, value);
  return text;
}

std::string guid(__be64 value) {
  const uint64_t g = be64toh(value);
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%04x:%04x:%04x\n", unsigned(g >> 48),
                unsigned(g >> 32 & 0xffff), unsigned(g >> 16 & 0xffff), unsigned(g & 0xffff));
  return text;
}

std::string gid(const ibv_gid& g) {
  std::string text;
  for (int i = 0; i < 16; i += 2) text += hex(i == 0 ? "%04x" : ":%04x", g.raw[i] << 8 | g.raw[i + 1]);
  return text + "\n";
}

void check_port(ibv_context* ctx, const std::string& port) {
  ibv_port_attr attr{};
  expect(ibv_query_port(ctx, 1, &attr) == 0, "ibv_query_port");
  expect_file(port + "state", std::to_string(attr.state) + ": " +
                                  (attr.state == IBV_PORT_ACTIVE ? "ACTIVE\n" : "?\n"));
  expect_file(port + "phys_state", std::to_string(attr.phys_state) + ": " +
                                       (attr.phys_state == 5 ? "LinkUp\n" : "?\n"));
  expect_file(port + "link_layer",
              attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet\n" : "InfiniBand\n");
  expect_file(port + "lid", hex("0x%llx\n", attr.lid));
  expect_file(port + "sm_lid", hex("0x%llx\n", attr.sm_lid));
  expect_file(port + "cap_mask", hex("0x%08llx\n", attr.port_cap_flags));
  for (int i = 0; i < attr.gid_tbl_len; ++i) {
    ibv_gid_entry entry{};
    const int err = ibv_query_gid_ex(ctx, 1, uint32_t(i), &entry, 0);
    const std::string index = std::to_string(i);
    if (err == ENODATA) {  // an empty slot: the view lists the GIDs that exist
      expect_file(port + "gids/" + index, "<missing>");
      continue;
    }
    expect(err == 0, "ibv_query_gid_ex");
    expect_file(port + "gids/" + index, gid(entry.gid));
    expect_file(port + "gid_attrs/types/" + index,
                entry.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2\n" : "IB/RoCE v1\n");
    char name[IF_NAMESIZE] = "<none>";
    if_indextoname(entry.ndev_ifindex, name);
    expect_file(port + "gid_attrs/ndevs/" + index, std::string(name) + "\n");
  }
  expect_file(port + "gids/" + std::to_string(attr.gid_tbl_len), "<missing>");
  __be16 pkey = 0;
  expect(ibv_query_pkey(ctx, 1, 0, &pkey) == 0, "ibv_query_pkey");
  expect_file(port + "pkeys/0", hex("0x%04llx\n", be16toh(pkey)));
}

// UCX's test (uct_ib_device_is_accessible): a character device, readable and writable.
void check_dev(const std::string& dev_name) {
  const std::string path = "/dev/infiniband/" + dev_name;
  struct stat st {};
  expect(stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode), path + " is a character device");
  expect(access(path.c_str(), R_OK | W_OK) == 0, path + " is readable and writable");
}

// The view covers /sys/class and /dev; everything that was there stays.
void check_originals_kept() {
  struct stat st {};
  expect(stat("/sys/class/net/lo", &st) == 0, "/sys/class/net/lo is still there");
  expect(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null is still a device");
  expect(stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode), "/dev/shm is still there");
  std::FILE* null = std::fopen("/dev/null", "w");
  expect(null != nullptr && std::fputs("x", null) >= 0, "/dev/null can be written");
  if (null != nullptr) std::fclose(null);
}

}  // namespace

int main() {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr || count < 1) {
    std::printf("FAIL: no device\n");
    return 1;
  }
  const std::string name = ibv_get_device_name(list[0]);
  const std::string dev_name = list[0]->dev_name;
  ibv_context* ctx = ibv_open_device(list[0]);
  if (ctx == nullptr) {
    std::printf("FAIL: cannot open %s\n", name.c_str());
    return 1;
  }
  const std::string device = "/sys/class/infiniband/" + name + "/";
  ibv_device_attr attr{};
  expect(ibv_query_device(ctx, &attr) == 0, "ibv_query_device");
  expect_file(device + "node_type", list[0]->node_type == IBV_NODE_CA ? "1: CA\n" : "?\n");
  expect_file(device + "node_guid", guid(attr.node_guid));
  expect_file(device + "sys_image_guid", guid(attr.sys_image_guid));
  expect_file(device + "fw_ver", std::string(attr.fw_ver) + "\n");
  expect_file("/sys/class/infiniband_verbs/" + dev_name + "/ibdev", name + "\n");
  check_port(ctx, device + "ports/1/");
  check_dev(dev_name);
  check_originals_kept();
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}
