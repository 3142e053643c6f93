// The texts and conversions of <infiniband/verbs.h> that programs print with
// (ibv_wc_status_str(3), ibv_event_type_str(3), ibv_node_type_str(3),
// ibv_port_state_str(3), ibv_rate_to_mult(3), ibv_rate_to_mbps(3)): the same
// words and numbers as rdma-core, so that a program's log reads the same on
// softrdma as on a kernel device.
#include <iterator>

#include "verbs/objects.h"

namespace {

template <size_t N>
const char* lookup(const char* const (&names)[N], int index) {
  return index >= 0 && size_t(index) < N && names[index] != nullptr ? names[index] : "unknown";
}

// enum ibv_rate, its multiple of 2.5 Gb/s (IBA 9.11 StaticRate) and its rate in
// Mb/s; 0 where rdma-core's conversion has no entry.
struct Rate {
  ibv_rate rate;
  int mult;
  int mbps;
};
constexpr Rate kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},      {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},      {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},     {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},     {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},   {IBV_RATE_14_GBPS, 0, 14062},
    {IBV_RATE_56_GBPS, 0, 56250},      {IBV_RATE_112_GBPS, 0, 112500},
    {IBV_RATE_168_GBPS, 0, 168750},    {IBV_RATE_25_GBPS, 0, 25781},
    {IBV_RATE_100_GBPS, 0, 103125},    {IBV_RATE_200_GBPS, 0, 206250},
    {IBV_RATE_300_GBPS, 0, 309375},    {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},     {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},  {IBV_RATE_800_GBPS, 320, 850000},
    {IBV_RATE_1200_GBPS, 480, 1275000},
};

}  // namespace

SOFTRDMA_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kNames[] = {
      "success",
      "local length error",
      "local QP operation error",
      "local EE context operation error",
      "local protection error",
      "Work Request Flushed Error",
      "memory management operation error",
      "bad response error",
      "local access error",
      "remote invalid request error",
      "remote access error",
      "remote operation error",
      "transport retry counter exceeded",
      "RNR retry counter exceeded",
      "local RDD violation error",
      "remote invalid RD request",
      "aborted error",
      "invalid EE context number",
      "invalid EE context state",
      "fatal error",
      "response timeout error",
      "general error",
      "TM error",
      "TM software rendezvous",
  };
  static_assert(std::size(kNames) == IBV_WC_TM_RNDV_INCOMPLETE + 1);
  return lookup(kNames, int(status));
}

SOFTRDMA_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kNames[] = {
      "CQ error",
      "local work queue catastrophic error",
      "invalid request local work queue error",
      "local access violation work queue error",
      "communication established",
      "send queue drained",
      "path migrated",
      "path migration request error",
      "local catastrophic error",
      "port active",
      "port error",
      "LID change",
      "P_Key change",
      "SM change",
      "SRQ catastrophic error",
      "SRQ limit reached",
      "last WQE reached",
      "client reregistration",
      "GID table change",
      "WQ fatal",
  };
  static_assert(std::size(kNames) == IBV_EVENT_WQ_FATAL + 1);
  return lookup(kNames, int(event));
}

SOFTRDMA_EXPORT const char* ibv_node_type_str(ibv_node_type node_type) {
  static const char* const kNames[] = {
      nullptr,  // 0 is no node type
      "InfiniBand channel adapter",
      "InfiniBand switch",
      "InfiniBand router",
      "iWARP NIC",
      "usNIC",
      "usNIC UDP",
      "unspecified",
  };
  static_assert(std::size(kNames) == IBV_NODE_UNSPECIFIED + 1);
  return lookup(kNames, int(node_type));
}

SOFTRDMA_EXPORT const char* ibv_port_state_str(ibv_port_state port_state) {
  static const char* const kNames[] = {
      "no state change (NOP)", "down", "init", "armed", "active", "active defer",
  };
  static_assert(std::size(kNames) == IBV_PORT_ACTIVE_DEFER + 1);
  return lookup(kNames, int(port_state));
}

SOFTRDMA_EXPORT int ibv_rate_to_mult(ibv_rate rate) {
  for (const Rate& r : kRates)
    if (r.rate == rate && r.mult != 0) return r.mult;
  return -1;
}

SOFTRDMA_EXPORT ibv_rate mult_to_ibv_rate(int mult) {
  for (const Rate& r : kRates)
    if (r.mult == mult && mult != 0) return r.rate;
  return IBV_RATE_MAX;
}

SOFTRDMA_EXPORT int ibv_rate_to_mbps(ibv_rate rate) {
  for (const Rate& r : kRates)
    if (r.rate == rate) return r.mbps;
  return -1;
}

SOFTRDMA_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const Rate& r : kRates)
    if (r.mbps == mbps) return r.rate;
  return IBV_RATE_MAX;
}
