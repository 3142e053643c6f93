// How grants are stored in the node segment's published tables (node_segment.h):
// the owner encodes, a peer decodes what it read. Shared by node_segment.cc and
// peer_node.cc only.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "samehost/node_segment.h"

namespace softrdma::samehost {

inline KeyTable::Value encode(const KeyGrant& g) {
  return {g.host_addr, g.iova, g.length, uint64_t(g.pd) | uint64_t(g.access) << 32,
          uint64_t(g.qpn) | uint64_t(g.shared.fd) << 32, g.shared.begin, g.shared.length,
          g.shared.inode};
}
inline KeyGrant decode_key(const KeyTable::Value& v) {
  return {v[0], v[1], v[2], uint32_t(v[3]), uint32_t(v[3] >> 32), uint32_t(v[4]),
          SharedSpan{v[5], v[6], v[7], uint32_t(v[4] >> 32)}};
}
inline QpTable::Value encode(const QpGrant& g) {
  // The state (ibv_qp_state, below 8) and the RNR timer (5 bits) share a word.
  return {uint64_t(g.state & 0xff) | uint64_t(g.min_rnr_timer & 0xff) << 8 |
              uint64_t(g.type) << 32,
          uint64_t(g.pd) | uint64_t(g.access) << 32,
          uint64_t(g.dest_qpn) | uint64_t(g.recv_queue) << 32,
          uint64_t(g.qkey) | uint64_t(g.xrcd) << 32};
}
inline QpGrant decode_qp(const QpTable::Value& v) {
  return {uint32_t(v[0] & 0xff), uint32_t(v[0] >> 32), uint32_t(v[1]), uint32_t(v[1] >> 32),
          uint32_t(v[2]), uint32_t(v[2] >> 32), uint32_t(v[0] >> 8) & 0xff, uint32_t(v[3]),
          uint32_t(v[3] >> 32)};
}

}  // namespace softrdma::samehost
