// Whom a CM MAD is for on a shared address (wire/cm_route.h): a request by its
// ServiceID, every answer by the Communication ID it names as the receiver's, and
// nothing for what the codec does not read.
#include "wire/cm_route.h"

#include <gtest/gtest.h>

#include <array>

#include "wire/cm_mad.h"

namespace softrdma::wire {
namespace {

using Mad = std::array<uint8_t, kMadBytes>;

template <class Msg>
Mad encoded(const Msg& m) {
  Mad mad{};
  encode(m, mad);
  return mad;
}

constexpr uint64_t kService = 0x0000000001060000ull | 7471;  // RDMA_PS_TCP, port 7471
constexpr uint32_t kTheirs = 0x11223344;
constexpr uint32_t kOurs = (37u << kCommIdSlotShift) | 0x2a;

TEST(CmRoute, RequestsGoToTheServiceTheyName) {
  CmReq req;
  req.local_comm_id = kTheirs;
  req.service_id = kService;
  CmRoute route = cm_route(encoded(req));
  EXPECT_EQ(route.by, CmRoute::By::kServiceId);
  EXPECT_EQ(route.service_id, kService);
  CmSidrReq sidr;
  sidr.request_id = kTheirs;
  sidr.service_id = kService + 1;
  route = cm_route(encoded(sidr));
  EXPECT_EQ(route.by, CmRoute::By::kServiceId);
  EXPECT_EQ(route.service_id, kService + 1);
}

// Each answer names the receiver's own Communication ID; its slot is the process.
template <class Msg>
void expect_answer_routed_to_ours(Msg m) {
  m.local_comm_id = kTheirs;
  m.remote_comm_id = kOurs;
  const CmRoute route = cm_route(encoded(m));
  EXPECT_EQ(route.by, CmRoute::By::kCommId);
  EXPECT_EQ(route.comm_id, kOurs);
  EXPECT_EQ(comm_id_slot(route.comm_id), 37u);
}

TEST(CmRoute, AnswersGoToWhoeverChoseTheCommunicationIdTheyName) {
  expect_answer_routed_to_ours(CmRep{});
  expect_answer_routed_to_ours(CmRtu{});
  expect_answer_routed_to_ours(CmRej{});
  expect_answer_routed_to_ours(CmMra{});
  expect_answer_routed_to_ours(CmDreq{});
  expect_answer_routed_to_ours(CmDrep{});
  CmSidrRep sidr;  // IBA 12.11.3: the Request ID is the requester's
  sidr.request_id = kOurs;
  const CmRoute route = cm_route(encoded(sidr));
  EXPECT_EQ(route.by, CmRoute::By::kCommId);
  EXPECT_EQ(route.comm_id, kOurs);
}

TEST(CmRoute, WhatNamesNobodyIsRoutedNowhere) {
  CmRej rej;  // a REJ naming no Communication ID of ours
  rej.local_comm_id = kTheirs;
  rej.remote_comm_id = 0;
  EXPECT_EQ(cm_route(encoded(rej)).by, CmRoute::By::kNothing);
  Mad other = encoded(CmRtu{});
  other[1] = 0x04;  // management class: not the CM's (IBA 13.4.4)
  EXPECT_EQ(cm_route(other).by, CmRoute::By::kNothing);
  EXPECT_EQ(cm_route(std::span<const uint8_t>(other).first(100)).by, CmRoute::By::kNothing);
  EXPECT_EQ(cm_route({}).by, CmRoute::By::kNothing);
}

TEST(CmRoute, EverySlotFitsACommunicationIdThatIsNeverZero) {
  for (uint32_t slot : {1u, 2u, kMaxQpnBlock}) {
    for (uint32_t counter : {0u, 1u, kCommIdCounterMask, kCommIdCounterMask + 1, 0xffffffffu}) {
      const uint32_t id = comm_id_in_slot(slot, counter);
      EXPECT_NE(id, 0u);
      EXPECT_EQ(comm_id_slot(id), slot) << slot << " " << counter;
    }
  }
}

}  // namespace
}  // namespace softrdma::wire
