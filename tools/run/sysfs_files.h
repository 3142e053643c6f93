// The files Linux's RDMA core shows under /sys/class for a device
// (drivers/infiniband/core/sysfs.c; rdma-core and UCX read them), made from what
// the device answered through verbs (device_query.h): the sysfs view that
// `softrdma run` shows the program it starts (mount_view.h).
#pragma once

#include <string>
#include <vector>

#include "run/device_query.h"

namespace softrdma::tools {

struct ViewFile {
  std::string path;      // relative to /sys/class, e.g. "infiniband/softrdma0/node_type"
  std::string contents;  // with the trailing newline the kernel writes
};

// The directories of /sys/class the view replaces; every other entry stays.
inline const std::vector<std::string> kReplacedClasses = {"infiniband", "infiniband_verbs"};

// infiniband/<name>/{node_type,node_guid,sys_image_guid,fw_ver},
// infiniband/<name>/ports/<n>/{state,phys_state,link_layer,lid,lid_mask_count,sm_lid,
// sm_sl,cap_mask,rate,gids/<i>,gid_attrs/types/<i>,gid_attrs/ndevs/<i>,pkeys/<i>},
// infiniband_verbs/<dev_name>/ibdev.
std::vector<ViewFile> class_files(const DeviceSnapshot& device);

// "fe80:0000:0000:0000:0000:0000:0000:0001", as the kernel prints a GID (%pI6).
std::string gid_text(const ibv_gid& gid);

}  // namespace softrdma::tools
