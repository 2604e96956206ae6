// What every part of the native kernel includes: ATen, the vector intrinsics, whether the AVX512 variants exist.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
// The AVX512 code (the exp's 16 lanes, the tiles, the packers) is compiled for that target whatever the build's
// flags (function-level targets) and runs only where cpuid says the CPU has it (`softmax_isa`), never elsewhere.
#define SELFATTN_HAS_AVX512_VARIANT 1
#endif

namespace {

constexpr double NEG_INF = -std::numeric_limits<double>::infinity();

}  // namespace
