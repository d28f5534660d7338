// Tests of Tensor (shapes, dtypes, views, transfers, the errors of misuse) and of the caching
// pool under it (reuse without driver allocations, OutOfMemory on an absurd request), per device.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "trident/core/allocator.h"
#include "trident/core/error.h"
#include "trident/core/tensor.h"
#include "tests/conformance.h"

using namespace trident;
using namespace trident::testing;
using Catch::Matchers::Contains;

TEST_CASE("tensor: shapes and dtype sizes", "[tensor]") {
  CHECK(shape_numel({200, 784}) == 156800);
  CHECK(shape_numel({}) == 1);  // a scalar
  CHECK(shape_numel({3, 0, 5}) == 0);
  CHECK(shape_string({200, 784}) == "[200, 784]");
  CHECK(shape_string({}) == "[]");
  CHECK_THROWS_AS(shape_numel({2, -1}), ShapeError);
  CHECK(dtype_size(DType::f32) == 4);
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::i32) == 4);
  CHECK(dtype_size(DType::u8) == 1);
  CHECK(std::string(dtype_name(DType::f32)) == "F32");
  CHECK(std::string(dtype_name(DType::bf16)) == "BF16");
  CHECK(std::string(dtype_name(DType::u8)) == "U8");

  Tensor undefined;
  CHECK_FALSE(undefined.defined());
  CHECK_FALSE(undefined.memory());
  CHECK_THROWS_AS(undefined.device(), Error);
}

TEST_CASE("tensor: creation, transfers, views and reshapes on every device", "[tensor]") {
  FOR_EACH_DEVICE(device) {
    Device& d = *device;
    Tensor e = Tensor::empty(d, {3, 5, 7}, DType::f16);
    CHECK(e.defined());
    CHECK(&e.device() == &d);
    CHECK(e.shape() == Shape{3, 5, 7});
    CHECK(e.dim(2) == 7);
    CHECK_THROWS(e.dim(3));
    CHECK(e.numel() == 105);
    CHECK(e.bytes() == 210);
    CHECK(e.dtype() == DType::f16);

    CHECK(Tensor::zeros(d, {7, 33}).to_host() == std::vector<float>(231, 0.0f));
    CHECK(Tensor::zeros(d, {257}, DType::i32).to_host_i32() == std::vector<int32_t>(257, 0));
    // Zero is every dtype's zero; a non-zero fill needs a dtype that can hold it.
    std::vector<uint8_t> bytes(5, 0xFF);
    Tensor::zeros(d, {5}, DType::u8).to_host(bytes.data(), bytes.size());
    CHECK(bytes == std::vector<uint8_t>(5, 0));
    std::vector<uint16_t> halves(3, 0xFFFF);
    Tensor::zeros(d, {3}, DType::bf16).to_host(halves.data(), halves.size() * 2);
    CHECK(halves == std::vector<uint16_t>(3, 0));
    CHECK_THROWS_AS(d.fill(Tensor::empty(d, {4}, DType::u8), 1.0f), ShapeError);

    const std::vector<float> values = random_floats(24, 1);
    Tensor t = Tensor::from_host(d, {4, 6}, values);
    CHECK(t.to_host() == values);
    CHECK_THROWS_AS(Tensor::from_host(d, {4, 5}, values), ShapeError);
    CHECK_THROWS_AS(t.to_host_i32(), ShapeError);
    CHECK_THROWS_AS(Tensor::from_host(d, {2}, std::vector<int32_t>{1, 2}).to_host(), ShapeError);
    CHECK_THROWS_WITH(t.copy_from_host(values.data(), 4), Contains("4 bytes"));
    std::vector<float> small(3);
    CHECK_THROWS_AS(t.to_host(small.data(), small.size() * sizeof(float)), ShapeError);

    // A view shares memory: writing through it shows in the parent, at the right place.
    Tensor row2 = t.view(12, {6});
    CHECK(row2.to_host() == std::vector<float>(values.begin() + 12, values.begin() + 18));
    const std::vector<float> ones(6, 1.0f);
    row2.copy_from_host(ones.data(), 6 * sizeof(float));
    std::vector<float> expect = values;
    std::fill(expect.begin() + 12, expect.begin() + 18, 1.0f);
    CHECK(t.to_host() == expect);
    CHECK(row2.view(2, {2}).to_host() == std::vector<float>{1.0f, 1.0f});  // views compose
    CHECK(t.view(20, {2, 2}).to_host() ==
          std::vector<float>(expect.begin() + 20, expect.end()));
    CHECK_THROWS_AS(t.view(20, {5}), ShapeError);   // runs past the end
    CHECK_THROWS_AS(t.view(-1, {2}), ShapeError);
    CHECK_THROWS_AS(row2.view(1, {6}), ShapeError);  // bounded by the view, not the storage
    CHECK_THROWS_WITH(t.view(20, {5}), Contains("[5]") && Contains("[4, 6]"));

    Tensor flat = t.reshape({24});
    CHECK(flat.shape() == Shape{24});
    CHECK(flat.memory().handle == t.memory().handle);
    CHECK_THROWS_AS(t.reshape({5, 5}), ShapeError);

    Tensor copy = Tensor::empty(d, {24});
    copy.copy_from(t);
    CHECK(copy.to_host() == expect);
    CHECK_THROWS_AS(copy.copy_from(row2), ShapeError);
  }
}

TEST_CASE("tensor: the caching pool reuses freed blocks without new driver allocations",
          "[tensor][allocator]") {
  FOR_EACH_DEVICE(device) {
    CachingAllocator& pool = device->allocator();
    device->synchronize();
    pool.empty_cache();
    REQUIRE(pool.bytes_cached() == 0);
    const size_t in_use = pool.bytes_in_use(), driver = pool.driver_allocations();
    void* first = nullptr;
    {
      Tensor a = Tensor::empty(*device, {1000});
      first = a.memory().handle;
      CHECK(pool.bytes_in_use() >= in_use + 4000);
      CHECK(pool.driver_allocations() == driver + 1);
    }
    CHECK(pool.bytes_in_use() == in_use);
    CHECK(pool.bytes_cached() >= 4000);
    {
      Tensor again = Tensor::empty(*device, {1000});  // the same size: the same block
      CHECK(again.memory().handle == first);
      Tensor smaller = Tensor::empty(*device, {10});  // nothing cached fits: a new block
      CHECK(pool.driver_allocations() == driver + 2);
    }
    {
      Tensor a = Tensor::empty(*device, {900});   // within 2x of a cached 4000-byte block
      Tensor b = Tensor::empty(*device, {5});     // the cached 512-byte block
      CHECK(pool.driver_allocations() == driver + 2);
      Tensor big = Tensor::empty(*device, {100000});  // larger than anything cached
      CHECK(pool.driver_allocations() == driver + 3);
    }
    // A step that allocates the same buffers again and again makes no driver allocation.
    for (int step = 0; step < 10; ++step) {
      Tensor x = Tensor::empty(*device, {1000}), y = Tensor::empty(*device, {100000});
      Tensor z = Tensor::zeros(*device, {10});
    }
    CHECK(pool.driver_allocations() == driver + 3);
    device->synchronize();
    pool.empty_cache();
    CHECK(pool.bytes_cached() == 0);
    CHECK(pool.bytes_in_use() == in_use);
  }
}

TEST_CASE("tensor: an absurd allocation is OutOfMemory naming the size, and the pool survives",
          "[tensor][allocator]") {
  FOR_EACH_DEVICE(device) {
    const int64_t pebibyte = int64_t(1) << 50;
    const size_t in_use = device->allocator().bytes_in_use();
    try {
      Tensor huge = Tensor::empty(*device, {pebibyte}, DType::u8);
      FAIL("allocating 1 PiB succeeded on " << device->info().id());
    } catch (const OutOfMemory& e) {
      const std::string message = e.what();
      INFO(message);
      CHECK_THAT(message, Contains(std::to_string(pebibyte)));   // the requested bytes
      CHECK_THAT(message, Contains(device->info().id()));        // which device
    }
    CHECK(device->allocator().bytes_in_use() == in_use);
    const std::vector<float> values = {1.0f, 2.0f, 3.0f};
    CHECK(Tensor::from_host(*device, {3}, values).to_host() == values);
  }
}
