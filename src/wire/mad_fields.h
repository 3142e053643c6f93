// MAD fields as data (as fields.h does for the transport headers): each field of a
// management datagram is (byte offset, width in bytes, bit shift, bit count), big-endian
// as IBA 13.4 and 12.6 lay them out, or a byte string. A message's layout binds each
// field to a member of a plain struct; one generic codec reads and writes every
// message, and a compile-time check proves that a layout's fields, reserved ones
// included, cover each bit of the message exactly once. No I/O, no allocation.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <tuple>
#include <type_traits>

namespace softrdma::wire::mad {

struct MadField {
  uint8_t offset;  // first byte, within the area the layout describes
  uint8_t bytes;   // numeric: 1..8 bytes, big-endian; byte string: its length
  uint8_t shift;   // of the field's least significant bit within those bytes
  uint8_t bits;    // width; 0 for a byte string

  constexpr bool octets() const { return bits == 0; }
  constexpr uint64_t mask() const { return bits >= 64 ? ~0ull : ((1ull << bits) - 1); }
  constexpr size_t end() const { return size_t(offset) + bytes; }
};

// A numeric field: `bits` bits whose lowest is `shift` bits above the lowest bit of
// the `bytes` bytes at `offset`.
constexpr MadField be(uint8_t offset, uint8_t bytes, uint8_t shift, uint8_t bits) {
  return {offset, bytes, shift, bits};
}
// A whole-byte numeric field.
constexpr MadField be(uint8_t offset, uint8_t bytes) {
  return {offset, bytes, 0, uint8_t(bytes * 8)};
}
// A byte string (GID, private data, additional rejection information).
constexpr MadField octets(uint8_t offset, uint8_t bytes) { return {offset, bytes, 0, 0}; }

// The caller has checked that the area holds f.end() bytes (the layouts' static
// checks and the decoders' size check together guarantee it).
inline uint64_t load(std::span<const uint8_t> area, MadField f) {
  uint64_t v = 0;
  for (uint8_t i = 0; i < f.bytes; ++i) v = (v << 8) | area[f.offset + i];
  return (v >> f.shift) & f.mask();
}
inline void store(std::span<uint8_t> area, MadField f, uint64_t value) {
  uint64_t v = 0;
  for (uint8_t i = 0; i < f.bytes; ++i) v = (v << 8) | area[f.offset + i];
  const uint64_t m = f.mask() << f.shift;
  v = (v & ~m) | ((value << f.shift) & m);
  for (int i = f.bytes - 1; i >= 0; --i) {
    area[f.offset + i] = uint8_t(v);
    v >>= 8;
  }
}

template <class T> struct IsByteArray : std::false_type {};
template <size_t N> struct IsByteArray<std::array<uint8_t, N>> : std::true_type {};

// A field bound to a member of Msg. `value_shift` places the field within the member
// when one value is split over several fields (the ECE vendor ID of a REP).
template <class Msg, class T>
struct Bind {
  MadField field;
  T Msg::*member;
  uint8_t value_shift = 0;
};
template <class Msg, class T>
constexpr Bind<Msg, T> bind(MadField f, T Msg::*member, uint8_t value_shift = 0) {
  return {f, member, value_shift};
}

// A member struct with a layout of its own (a path), placed at `base`.
template <class Msg, class Sub>
struct Nest {
  uint8_t base;
  Sub Msg::*member;
};
template <class Msg, class Sub>
constexpr Nest<Msg, Sub> nest(uint8_t base, Sub Msg::*member) {
  return {base, member};
}

// Specialised per struct: kBytes (the area), kBound (a tuple of Bind / Nest), kReserved
// (an array of MadField that are written as zero and ignored on receipt, IBA 13.4.1.1).
template <class Msg> struct Layout;

namespace detail {

template <class Msg, class T>
void load_one(std::span<const uint8_t> area, const Bind<Msg, T>& b, Msg& m) {
  const MadField f = b.field;
  if constexpr (IsByteArray<T>::value) {
    std::copy_n(area.begin() + f.offset, f.bytes, (m.*b.member).begin());
  } else if constexpr (std::is_same_v<T, bool>) {
    m.*b.member = load(area, f) != 0;
  } else {
    // Replaces just the member's bits this field holds (a split value has several).
    using U = typename std::conditional_t<std::is_enum_v<T>, std::underlying_type<T>,
                                          std::type_identity<T>>::type;
    const uint64_t bits = f.mask() << b.value_shift;
    const uint64_t old = uint64_t(U(m.*b.member)) & ~bits;
    m.*b.member = T(U(old | (load(area, f) << b.value_shift)));
  }
}
template <class Msg, class Sub>
void load_one(std::span<const uint8_t> area, const Nest<Msg, Sub>& n, Msg& m);

template <class Msg, class T>
void store_one(std::span<uint8_t> area, const Bind<Msg, T>& b, const Msg& m) {
  const MadField f = b.field;
  if constexpr (IsByteArray<T>::value) {
    std::copy_n((m.*b.member).begin(), f.bytes, area.begin() + f.offset);
  } else {
    store(area, f, uint64_t(m.*b.member) >> b.value_shift);
  }
}
template <class Msg, class Sub>
void store_one(std::span<uint8_t> area, const Nest<Msg, Sub>& n, const Msg& m);

}  // namespace detail

// Reads every bound field of `area` into a value-initialised Msg.
template <class Msg>
Msg load_fields(std::span<const uint8_t> area) {
  Msg m{};
  std::apply([&](const auto&... b) { (detail::load_one(area, b, m), ...); },
             Layout<Msg>::kBound);
  return m;
}
// Zeroes the area (reserved bits are sent as zero) and writes every bound field.
template <class Msg>
void store_fields(const Msg& m, std::span<uint8_t> area) {
  std::fill_n(area.begin(), Layout<Msg>::kBytes, uint8_t(0));
  std::apply([&](const auto&... b) { (detail::store_one(area, b, m), ...); },
             Layout<Msg>::kBound);
}

namespace detail {
template <class Msg, class Sub>
void load_one(std::span<const uint8_t> area, const Nest<Msg, Sub>& n, Msg& m) {
  m.*n.member = load_fields<Sub>(area.subspan(n.base, Layout<Sub>::kBytes));
}
template <class Msg, class Sub>
void store_one(std::span<uint8_t> area, const Nest<Msg, Sub>& n, const Msg& m) {
  auto sub = area.subspan(n.base, Layout<Sub>::kBytes);
  // Only the nested layout's own bytes: its bound and reserved fields tile them.
  std::apply([&](const auto&... b) { (store_one(sub, b, m.*n.member), ...); },
             Layout<Sub>::kBound);
}

// ---- Compile-time layout check ----------------------------------------------------

constexpr size_t kMaxAreaBits = 256 * 8;
using BitSet = std::array<bool, kMaxAreaBits>;

// Marks the bits of `f` (placed at `base`); false when a bit is marked twice or the
// field leaves the area.
constexpr bool mark(BitSet& seen, size_t area_bytes, size_t base, MadField f) {
  if (f.octets() ? f.bytes == 0 : (f.bytes < 1 || f.bytes > 8 || f.shift + f.bits > f.bytes * 8))
    return false;
  if (base + f.end() > area_bytes) return false;
  const size_t first = f.octets() ? 0 : f.shift;
  const size_t count = f.octets() ? f.bytes * 8u : f.bits;
  const size_t bit_after = (base + f.end()) * 8;  // big-endian: bit index from the MSB
  for (size_t b = first; b < first + count; ++b) {
    if (seen[bit_after - 1 - b]) return false;
    seen[bit_after - 1 - b] = true;
  }
  return true;
}

template <class Msg> constexpr bool mark_layout(BitSet& seen, size_t area_bytes, size_t base);

template <class Msg, class T>
constexpr bool mark_bound(BitSet& seen, size_t area_bytes, size_t base, const Bind<Msg, T>& b) {
  // The member can hold the field: a byte string of exactly its size, a number wide enough.
  if constexpr (IsByteArray<T>::value) {
    if (!b.field.octets() || b.field.bytes != std::tuple_size_v<T>) return false;
  } else {
    const size_t member_bits = std::is_same_v<T, bool> ? 1 : sizeof(T) * 8;
    if (b.field.octets() || b.field.bits + b.value_shift > member_bits) return false;
  }
  return mark(seen, area_bytes, base, b.field);
}
template <class Msg, class Sub>
constexpr bool mark_bound(BitSet& seen, size_t area_bytes, size_t base, const Nest<Msg, Sub>& n) {
  if (base + n.base + Layout<Sub>::kBytes > area_bytes) return false;
  return mark_layout<Sub>(seen, area_bytes, base + n.base);
}

template <class Msg>
constexpr bool mark_layout(BitSet& seen, size_t area_bytes, size_t base) {
  bool ok = std::apply(
      [&](const auto&... b) { return (mark_bound(seen, area_bytes, base, b) && ...); },
      Layout<Msg>::kBound);
  for (const MadField& f : Layout<Msg>::kReserved) ok = ok && mark(seen, area_bytes, base, f);
  return ok;
}

}  // namespace detail

// True when Msg's bound and reserved fields lie inside its area and cover each of its
// bits exactly once, and every member can hold its field.
template <class Msg>
constexpr bool layout_tiles() {
  constexpr size_t bytes = Layout<Msg>::kBytes;
  if (bytes * 8 > detail::kMaxAreaBits) return false;
  detail::BitSet seen{};
  if (!detail::mark_layout<Msg>(seen, bytes, 0)) return false;
  for (size_t bit = 0; bit < bytes * 8; ++bit)
    if (!seen[bit]) return false;
  return true;
}

}  // namespace softrdma::wire::mad
