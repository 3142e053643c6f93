// Address handle (IBA 10.2.2, 11.2.2): where a UD send goes. RoCEv2 needs the GRH
// (IBA A17.4.5.1), so an AH is a destination GID and the source GID index (the
// GRH's traffic class, flow label and hop limit are not carried: softrdma's UDP
// sends use the socket's). The verbs object is the first member: the verbs layer
// hands out &ibv, and a UD work request's wr.ud.ah leads back here.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "wire/ip_udp.h"

namespace softrdma::engine {

class Pd;

struct Ah {
  ibv_ah ibv{};
  Pd* pd = nullptr;
  wire::Gid dgid{};
  uint8_t sgid_index = 0;

  static Ah* from(ibv_ah* ah) { return reinterpret_cast<Ah*>(ah); }
};
static_assert(std::is_standard_layout_v<Ah> && offsetof(Ah, ibv) == 0);

}  // namespace softrdma::engine
