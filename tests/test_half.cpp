// core/half.h against an independent model of the two formats: the float -> 16-bit rounding
// (nearest, ties to even, overflow to infinity, subnormals) compared with a float64 rounding
// built from frexp / nearbyint, every 16-bit pattern decoded and round-tripped, and the CPU
// kernel's F16C path compared with the scalar formulas it must equal.
#include <catch2/catch.hpp>

#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "trident/core/half.h"
#include "trident/kernels/cpu/convert.h"

using namespace trident;

namespace {

// One 16-bit float format as its parameters: 10 or 7 stored mantissa bits, the exponent of
// the smallest normal, the bias and the largest finite value.
struct Format {
  DType dtype;
  int mantissa_bits, exponent_bits, min_exponent;
  double max_finite;
};

const Format kF16{DType::f16, 10, 5, -14, 65504.0};
const Format kBF16{DType::bf16, 7, 8, -126, std::ldexp(255.0, 120)};  // (2 - 2^-7) * 2^127

// The value of a bit pattern, read from its fields (not through half.h).
double decode(const Format& f, uint16_t bits) {
  const bool negative = bits >> 15;
  const int exponent_field = (bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  const int all_ones = (1 << f.exponent_bits) - 1;
  double value;
  if (exponent_field == all_ones)
    value = mantissa == 0 ? std::numeric_limits<double>::infinity()
                          : std::numeric_limits<double>::quiet_NaN();
  else if (exponent_field == 0)  // subnormal: mantissa * 2^(min_exponent - mantissa_bits)
    value = std::ldexp(double(mantissa), f.min_exponent - f.mantissa_bits);
  else
    value = std::ldexp(double(mantissa + (1 << f.mantissa_bits)),
                       exponent_field - (all_ones >> 1) - f.mantissa_bits);
  return negative ? -value : value;
}

// The nearest value of the format to v (ties to even), infinity past the largest finite value
// by half an ulp or more: in float64, where v / quantum is exact and nearbyint rounds to even.
double round_to_format(const Format& f, double v) {
  if (v == 0.0 || !std::isfinite(v)) return v;
  int e = 0;
  std::frexp(std::abs(v), &e);  // |v| = m * 2^e, m in [0.5, 1): its leading bit is 2^(e - 1)
  const int lead = std::max(e - 1, f.min_exponent);
  const double quantum = std::ldexp(1.0, lead - f.mantissa_bits);
  const double rounded = std::nearbyint(v / quantum) * quantum;
  if (std::abs(rounded) > f.max_finite) return std::copysign(std::numeric_limits<double>::infinity(), v);
  return rounded;
}

uint16_t to_bits(const Format& f, float v) { return float_to_half_bits(f.dtype, v); }

float from_bits(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// Checks one float against the model; returns false (after a failed CHECK) on a mismatch.
bool rounds_like_the_model(const Format& f, float v) {
  const uint16_t bits = to_bits(f, v);
  const double got = decode(f, bits);
  if (std::isnan(v)) {
    // NaN stays NaN, quiet (the top mantissa bit), with its sign.
    const bool ok = std::isnan(got) && (bits >> 15) == (float_bits(v) >> 31) &&
                    (bits >> (f.mantissa_bits - 1) & 1);
    if (!ok) {
      INFO("NaN 0x" << std::hex << float_bits(v) << " -> 0x" << bits);
      CHECK(ok);
    }
    return ok;
  }
  const double want = round_to_format(f, double(v));
  const bool ok = got == want && std::signbit(got) == std::signbit(want);
  if (!ok) {
    INFO(dtype_name(f.dtype) << ": float 0x" << std::hex << float_bits(v) << std::dec << " ("
                             << v << ") -> 0x" << std::hex << bits << std::dec << " = " << got
                             << ", want " << want);
    CHECK(ok);
  }
  return ok;
}

// Floats around every rounding position of every exponent: the low bits at the cut are a tie,
// a tie plus or minus one, zero or all ones, above upper bits that are random, zero or all
// ones. The cut moves with the exponent where the result is subnormal, so every position from
// bit 0 to bit 23 is tried in every binade.
std::vector<float> floats_at_rounding_positions(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out;
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t exponent = 0; exponent < 255; ++exponent)
      for (uint32_t cut = 1; cut <= 24; ++cut) {
        const uint32_t low_mask = cut >= 23 ? 0x7fffffu : (1u << cut) - 1u;
        const uint32_t tie = 1u << (cut - 1);
        for (int upper_kind = 0; upper_kind < 6; ++upper_kind) {
          const uint32_t upper = upper_kind == 0 ? 0u : upper_kind == 1 ? 0x7fffffu : rng();
          for (const uint32_t low : {tie, tie - 1u, tie + 1u, 0u, low_mask}) {
            const uint32_t mantissa = ((upper & ~low_mask) | (low & low_mask)) & 0x7fffffu;
            out.push_back(from_bits(sign << 31 | exponent << 23 | mantissa));
          }
        }
      }
  return out;
}

std::vector<float> random_bit_patterns(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out(count);
  for (float& v : out) v = from_bits(rng());
  return out;
}

// Values a conversion must get right by name: signed zeros, infinities, NaNs, the largest
// finite values and the overflow boundary, the smallest normals and subnormals, half of the
// smallest subnormal (a tie to zero).
std::vector<float> named_specials() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
          -std::numeric_limits<float>::quiet_NaN(), from_bits(0x7f800001u) /* signalling */,
          from_bits(0xffbfffffu), 65504.0f, 65519.996f, 65520.0f, -65520.0f, 65536.0f, 1e10f,
          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
          std::ldexp(1.0f, -14), std::ldexp(1.0f, -24), std::ldexp(1.0f, -25),
          std::ldexp(1.5f, -25), std::ldexp(1.0f, -26), std::ldexp(3.0f, -25),
          std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
          -std::numeric_limits<float>::denorm_min(), from_bits(0x7f7f8000u) /* bf16 tie to inf */,
          from_bits(0x7f7f7fffu), 1.0f + std::ldexp(1.0f, -8), 1.0f + std::ldexp(1.0f, -11),
          1.0f + std::ldexp(3.0f, -11), 2047.0f / 1024.0f + std::ldexp(1.0f, -11), 0.1f, -0.3f};
}

}  // namespace

TEST_CASE("half: float -> f16 and bf16 round to nearest even like an independent float64 "
          "model (ties at every position, overflow, subnormals, NaN)", "[half]") {
  REQUIRE(std::fegetround() == FE_TONEAREST);  // the model's nearbyint
  // The model itself, on values whose answers are known.
  CHECK(round_to_format(kF16, 65519.0) == 65504.0);
  CHECK(std::isinf(round_to_format(kF16, 65520.0)));
  CHECK(round_to_format(kF16, std::ldexp(1.0, -25)) == 0.0);
  CHECK(round_to_format(kF16, std::ldexp(3.0, -25)) == std::ldexp(1.0, -23));
  CHECK(round_to_format(kBF16, 1.0 + std::ldexp(3.0, -8)) == 1.0 + std::ldexp(1.0, -6));
  for (const Format& f : {kF16, kBF16}) {
    INFO(dtype_name(f.dtype));
    size_t failures = 0;
    for (const float v : named_specials()) failures += !rounds_like_the_model(f, v);
    for (const float v : floats_at_rounding_positions(11)) {
      if (!rounds_like_the_model(f, v) && ++failures > 20) break;
    }
    for (const float v : random_bit_patterns(size_t(1) << 21, 12)) {
      if (!rounds_like_the_model(f, v) && ++failures > 20) break;
    }
    CHECK(failures == 0);
  }
}

TEST_CASE("half: every f16 and bf16 pattern widens exactly and rounds back to itself", "[half]") {
  for (const Format& f : {kF16, kBF16}) {
    INFO(dtype_name(f.dtype));
    size_t failures = 0;
    for (uint32_t pattern = 0; pattern < 65536; ++pattern) {
      const uint16_t bits = uint16_t(pattern);
      const float wide = half_bits_to_float(f.dtype, bits);
      const double want = decode(f, bits);
      const uint16_t back = float_to_half_bits(f.dtype, wide);
      bool ok;
      if (std::isnan(want))  // NaN: a NaN of the same sign both ways (the payload may be quieted)
        ok = std::isnan(wide) && std::signbit(wide) == bool(bits >> 15) &&
             std::isnan(decode(f, back)) && (back >> 15) == (bits >> 15);
      else
        ok = double(wide) == want && std::signbit(wide) == std::signbit(want) && back == bits;
      if (!ok && ++failures <= 5) {
        INFO("pattern 0x" << std::hex << pattern << " -> float 0x" << float_bits(wide)
                          << " -> 0x" << back);
        CHECK(ok);
      }
    }
    CHECK(failures == 0);
  }
  // The helpers agree with the type-specific functions.
  CHECK(float_to_half_bits(DType::f16, 1.5f) == float_to_f16(1.5f));
  CHECK(float_to_half_bits(DType::bf16, 1.5f) == float_to_bf16(1.5f));
  CHECK(unit_roundoff(DType::f16) == std::ldexp(1.0, -11));
  CHECK(unit_roundoff(DType::bf16) == std::ldexp(1.0, -8));
  CHECK(unit_roundoff(DType::f32) == std::ldexp(1.0, -24));
}

TEST_CASE("half: the CPU kernel's conversions (F16C where present) equal the scalar formulas",
          "[half][cpu]") {
#if defined(__x86_64__) || defined(__i386__)
  if (!__builtin_cpu_supports("f16c"))
    WARN("this CPU has no F16C: only the scalar path of kernels/cpu/convert.cpp is compared");
#endif
  // Ties at every position and random patterns, in a length that is not a multiple of 8 (the
  // vector loop's tail) and large enough to be split over threads.
  std::vector<float> values = floats_at_rounding_positions(21);
  const std::vector<float> randoms = random_bit_patterns(size_t(1) << 20, 22);
  values.insert(values.end(), randoms.begin(), randoms.end());
  const std::vector<float> specials = named_specials();
  values.insert(values.end(), specials.begin(), specials.end());
  values.push_back(0.5f);
  const int64_t n = int64_t(values.size());
  REQUIRE(n % 8 != 0);
  for (const DType t : {DType::f16, DType::bf16}) {
    INFO(dtype_name(t));
    std::vector<uint16_t> narrow(values.size());
    cpu::convert(values.data(), DType::f32, narrow.data(), t, n);
    size_t failures = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t want = float_to_half_bits(t, values[i]);
      // NaN: F16C keeps the payload's top bits, the scalar formula a canonical quiet NaN; both
      // are NaN of the input's sign, which is what the contract asks.
      const bool ok = std::isnan(values[i])
                          ? std::isnan(half_bits_to_float(t, narrow[i])) && (narrow[i] >> 15) == (want >> 15)
                          : narrow[i] == want;
      if (!ok && ++failures <= 5) {
        INFO("float 0x" << std::hex << float_bits(values[i]) << ": kernel 0x" << narrow[i]
                        << ", scalar 0x" << want);
        CHECK(ok);
      }
    }
    CHECK(failures == 0);

    // Widening: every pattern, repeated so that the vector loop and the threads see all of it.
    std::vector<uint16_t> patterns(65536 * 3 + 5);
    for (size_t i = 0; i < patterns.size(); ++i) patterns[i] = uint16_t(i * 40503u);
    std::vector<float> wide(patterns.size());
    cpu::convert(patterns.data(), t, wide.data(), DType::f32, int64_t(patterns.size()));
    failures = 0;
    for (size_t i = 0; i < patterns.size(); ++i) {
      const float want = half_bits_to_float(t, patterns[i]);
      const bool ok = std::isnan(want) ? std::isnan(wide[i]) && std::signbit(wide[i]) == std::signbit(want)
                                       : float_bits(wide[i]) == float_bits(want);
      if (!ok && ++failures <= 5) {
        INFO("pattern 0x" << std::hex << patterns[i] << ": kernel 0x" << float_bits(wide[i])
                          << ", scalar 0x" << float_bits(want));
        CHECK(ok);
      }
    }
    CHECK(failures == 0);
  }
  // Between the two 16-bit types (through float32: one rounding) and from bytes (exact).
  std::vector<uint16_t> f16(65536), bf16(65536);
  for (uint32_t i = 0; i < 65536; ++i) f16[i] = uint16_t(i);
  cpu::convert(f16.data(), DType::f16, bf16.data(), DType::bf16, 65536);
  size_t failures = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t want = float_to_bf16(f16_to_float(uint16_t(i)));
    if (std::isnan(f16_to_float(uint16_t(i))) ? !std::isnan(bf16_to_float(bf16[i])) : bf16[i] != want)
      ++failures;
  }
  CHECK(failures == 0);
  std::vector<uint8_t> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[size_t(i)] = uint8_t(i);
  for (const DType t : {DType::f16, DType::bf16}) {
    std::vector<uint16_t> out(256);
    cpu::convert(bytes.data(), DType::u8, out.data(), t, 256);
    for (int i = 0; i < 256; ++i) CHECK(half_bits_to_float(t, out[size_t(i)]) == float(i));
  }
}
