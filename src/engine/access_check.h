// The one access check (docs/decisions/same-host-executor.md "One access check"):
// whether a remote request may touch memory, decided by the rules of IBA 9.7.5 and
// 10.6 wherever the request is executed — by the RoCE responder (rc/responder.cc),
// the iWARP receiver (iwarp/receive.cc, RFC 5040 §6.4 defers to the same checks),
// and a same-host initiator acting as its peer's RNIC (host/). Each caller feeds it
// a KeyView: the key as this process holds it (an Mr or a bound Mw, mr.cc / mw.cc)
// or as a peer published it (samehost::KeyGrant). The callers differ in how they
// look keys up and when (a packet at a time, or a whole message), never in what
// they decide.
#pragma once

#include <cstdint>

#include "engine/mr.h"
#include "samehost/node_segment.h"

namespace softrdma::samehost {
struct KeyGrant;
}

namespace softrdma::engine {

// What executing a request comes to: the responder's answer (IBA 9.7.5.1: done,
// RNR NAK, or a NAK ending both QPs) and, for a same-host initiator, what it does
// instead of sending (kWire, kNotReady) or its own gather's error.
enum class Verdict : uint8_t {
  kDone,               // executed (or may be)
  kRnr,                // IBA 9.7.5.1.4: no receive WQE
  kInvalidRequest,     // IBA 9.7.5.2.4 NAK Invalid Request
  kRemoteAccess,       // IBA 9.7.5.2.4 NAK Remote Access Error
  kRemoteOperational,  // IBA 9.7.5.2.4 NAK Remote Operational Error
  kWire,               // same host: the peer does not publish what this needs
  kNotReady,           // same host: the peer's QP takes no request now (a lost packet)
  kLocalProtection,    // same host: this side's own buffer went (its gather's error)
};

// A key as the check sees it, whichever process holds it.
struct KeyView {
  uint64_t pd = 0;      // its PD, comparable with RemoteAccess::pd (same source)
  uint32_t access = 0;  // IBV_ACCESS_* it grants
  uint64_t base = 0;    // the first address it is named by (0: zero based)
  uint64_t length = 0;
  uint32_t qpn = 0;  // a type 2 window: the QP it was bound through; 0: any QP

  // IBA 10.6.3: an MR of this process (registered zero based, its iova is 0).
  static KeyView of(const Mr& mr) {
    return KeyView{reinterpret_cast<uintptr_t>(mr.pd), uint32_t(mr.access), mr.iova, mr.length, 0};
  }
  // IBA 10.6.7.3: a window of this process, if `rkey` names it as bound now.
  static bool of(const Mw& mw, uint32_t rkey, KeyView& out);
  // A same-host peer's key as its owner published it (MrTable::publish).
  static KeyView of(const samehost::KeyGrant& grant) {
    // Published with the name of its first byte (0 for a zero-based window) and
    // the QP a type 2 window serves (MrTable::publish).
    return KeyView{grant.pd, grant.access, grant.iova, grant.length, grant.qpn};
  }
};

// PDs of this process as KeyView and RemoteAccess compare them.
inline uint64_t pd_id(const Pd* pd) { return reinterpret_cast<uintptr_t>(pd); }

// A request for memory as the responder sees it.
struct RemoteAccess {
  int need = 0;  // the right it needs: IBV_ACCESS_REMOTE_{READ,WRITE,ATOMIC}
  uint64_t va = 0;
  uint64_t length = 0;  // bytes it touches (8 for an ATOMIC)
  uint64_t pd = 0;      // the PD the key must be of: the QP's, or its XRC SRQ's (A14)
  uint32_t qpn = 0;     // the QP it arrived at (type 2 windows)
};

// IBA 10.2.4.2: the QP's own remote access rights (qp_access_flags) must
// allow the operation, else Invalid Request. Checked per packet by the RoCE responder.
inline bool qp_allows(uint32_t qp_access, int need) { return (qp_access & uint32_t(need)) != 0; }

// IBA 9.7.5.1 / 9.4.5 (o9-13): what no key can make right: a message longer than
// the port's max_msg_size, an ATOMIC at an address not 8-byte aligned. kDone or
// kInvalidRequest.
inline Verdict check_message(const RemoteAccess& r, uint64_t max_msg_size, bool atomic) {
  if (r.length > max_msg_size) return Verdict::kInvalidRequest;
  if (atomic && r.va % 8 != 0) return Verdict::kInvalidRequest;
  return Verdict::kDone;
}

// IBA 10.6.3 / 10.6.7.3 (C10-79..): the key, `key` null when none is named so
// (no such key, a window not bound, or bound under another key): its PD (and a
// type 2 window's QP), its rights, then the range. kNone with `offset` the request's
// first byte within the key, or the first rule broken. Inline: every gather and
// scatter entry of the wire's data path passes here.
inline AccessError check_key(const KeyView* key, const RemoteAccess& r, uint64_t& offset) {
  if (key == nullptr) return AccessError::kBadKey;
  // IBA 10.6.3 / 10.2.3: the key's PD must be the QP's; a type 2 window's QP the
  // requesting one (10.6.7.3).
  if (key->pd != r.pd || (key->qpn != 0 && key->qpn != r.qpn)) return AccessError::kWrongPd;
  if ((key->access & uint32_t(r.need)) != uint32_t(r.need)) return AccessError::kNoPermission;
  // The whole range within the key's, written so that nothing wraps.
  if (r.va < key->base || r.length > key->length || r.va - key->base > key->length - r.length)
    return AccessError::kOutOfBounds;
  offset = r.va - key->base;
  return AccessError::kNone;
}

// The whole check, in the responder's order: the QP's rights, the message, then
// (for a message that touches memory) the key. kDone, kInvalidRequest or
// kRemoteAccess; `offset` as check_key's. The same-host initiator's (rc/host_*).
// Inline: once per same-host WQE, on the post's own path.
inline Verdict check_remote_access(uint32_t qp_access, uint64_t max_msg_size, bool atomic,
                                   const RemoteAccess& r, const KeyView* key, uint64_t& offset) {
  if (!qp_allows(qp_access, r.need)) return Verdict::kInvalidRequest;
  if (const Verdict v = check_message(r, max_msg_size, atomic); v != Verdict::kDone) return v;
  offset = 0;
  // A zero-length message touches nothing and is checked against no key, as the
  // wire's responder does (it resolves no range for it).
  if (r.length == 0) return Verdict::kDone;
  return check_key(key, r, offset) == AccessError::kNone ? Verdict::kDone : Verdict::kRemoteAccess;
}

}  // namespace softrdma::engine
