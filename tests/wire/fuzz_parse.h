// The body of the parse fuzzer, callable from GoogleTest as well as from libFuzzer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "wire/cm_mad.h"
#include "wire/packet.h"

namespace softrdma::wire::testing {

// Parses `data`, and on success reads every field, the payload and the ICRC, and
// checks that re-encoding the decoded fields reproduces headers and payload.
// Aborts on a broken invariant; returns what parse_packet said.
ParseError fuzz_parse_one(const uint8_t* data, size_t size);

// Decodes `data` as a CM MAD, and on success checks that encoding the message and
// decoding it again gives it back, and that the IP CM header of a REQ / SIDR_REQ
// survives the same. Aborts on a broken invariant; returns what decode_cm said.
MadError fuzz_cm_mad_one(const uint8_t* data, size_t size);

}  // namespace softrdma::wire::testing
