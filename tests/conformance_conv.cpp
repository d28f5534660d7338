// Op conformance, convolution: conv2d forward and backward (the backend's and the core default),
// im2col / col2im, and the workspace the front tracks (backward twice, backward after another op
// reused the workspace or rewrote the input), on every device against trident::reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "trident/kernels/reference/reference_ops.h"
#include "tests/conformance.h"

using namespace trident;
using namespace trident::testing;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Conv2dShape conv(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh, int64_t kw,
                 int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  Conv2dShape s;
  s.batch = n; s.in_channels = c; s.height = h; s.width = w; s.out_channels = oc;
  s.kernel_h = kh; s.kernel_w = kw; s.stride_h = sh; s.stride_w = sw; s.pad_h = ph; s.pad_w = pw;
  return s;
}

std::vector<Conv2dShape> conv_shapes() {
  return {
      conv(1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0),      // the smallest
      conv(2, 1, 28, 28, 10, 5, 5, 1, 1, 0, 0),   // seed CNN, first layer
      conv(3, 10, 12, 12, 20, 5, 5, 1, 1, 0, 0),  // seed CNN, second layer
      conv(2, 3, 7, 9, 4, 3, 3, 1, 1, 0, 0),      // odd sizes
      conv(3, 2, 8, 8, 5, 3, 3, 2, 2, 1, 1),      // stride 2, padding 1 (ResNet downsampling)
      conv(1, 2, 7, 6, 3, 3, 2, 2, 2, 2, 2),      // non-square kernel, padding past the kernel
      conv(2, 4, 9, 9, 7, 1, 1, 1, 1, 0, 0),      // 1x1
      conv(2, 4, 9, 9, 7, 1, 1, 2, 2, 0, 0),      // 1x1 stride 2 (ResNet shortcut)
      conv(9, 3, 10, 10, 4, 3, 3, 1, 1, 1, 1),    // a batch split over several threads
      conv(2, 3, 11, 8, 5, 2, 4, 3, 1, 1, 2),     // every dimension different
      conv(4, 8, 7, 7, 16, 3, 3, 1, 1, 1, 1),     // ResNet's last stage, small
      // Small images with C*KH*KW >= 128: CUDA's folded layout (one GEMM over all samples)
      conv(3, 16, 9, 7, 5, 3, 3, 1, 1, 1, 1),
      conv(2, 24, 11, 10, 6, 3, 5, 2, 1, 1, 2),   // ... with a rectangular kernel and stride
      // ... 7x7 planes (an odd run) with 8 samples: CUDA's packs of columns across samples
      conv(8, 16, 7, 7, 24, 3, 3, 1, 1, 1, 1),
      // 7x7 planes: the CPU multiplies 6 samples' patch matrices at once, so 13 samples make
      // full groups and a ragged one in each thread's piece
      conv(13, 4, 7, 7, 6, 3, 3, 1, 1, 1, 1),
      // Stride 1, at most as many output channels as input ones: CUDA takes the data gradient
      // as a convolution of dy with the flipped kernel (padding KH-1-PH), with "same" padding,
      // with none on one axis and a rectangular kernel, at 17x17 x 32 channels (a ResNet
      // layer's product, K = 288, in a small batch), and in the folded layout (its weight
      // gradient batched, then as one product)
      conv(3, 6, 9, 11, 4, 3, 3, 1, 1, 1, 1),
      conv(2, 5, 8, 10, 3, 2, 3, 1, 1, 0, 1),
      conv(2, 32, 17, 17, 32, 3, 3, 1, 1, 1, 1),
      conv(3, 16, 8, 9, 16, 3, 3, 1, 1, 1, 1),
      conv(4, 16, 6, 7, 16, 3, 3, 1, 1, 1, 1),
      // 3x3 at stride 1 with 16 channels or more over 100 positions or more: the CPU's
      // Winograd F(2x2, 3x3), forward and data gradient; an odd width (a half tile at the
      // edge), and padding 0 and 2 on the two axes (the data gradient's padding 2 and 0)
      conv(2, 16, 12, 11, 20, 3, 3, 1, 1, 1, 1),
      conv(2, 20, 13, 12, 16, 3, 3, 1, 1, 0, 2),
      // ... and CUDA's and OpenCL's float32 Winograd (the shapes above from 16 channels too):
      // 2475 tiles of 2x2 outputs (odd sizes: half tiles at two edges), so that blocks of 32
      // tiles straddle samples and the last is short, 24 output channels (a short block of
      // 32), and the weight gradient's 155 slices of 16 tiles, the last of 11
      conv(11, 16, 29, 29, 24, 3, 3, 1, 1, 1, 1),
      // 15 channels: CUDA's folded layout with the data gradient as a convolution (Winograd
      // takes 16 and more)
      conv(3, 15, 8, 9, 15, 3, 3, 1, 1, 1, 1),
      // ... with 20 -> 18 channels (the flipped kernel's channels swapped, neither a multiple
      // of 8)
      conv(2, 20, 6, 5, 18, 3, 3, 1, 1, 1, 1),
  };
}

struct ConvData {
  std::vector<float> x, w, b, dy, y, dx, dw, db;
};

ConvData reference_conv(const Conv2dShape& s, uint32_t& seed, bool bias) {
  ConvData d;
  d.x = random_floats(size_t(s.input_numel()), ++seed);
  d.w = random_floats(size_t(s.weight_numel()), ++seed);
  d.b = random_floats(size_t(s.out_channels), ++seed);
  d.dy = random_floats(size_t(s.output_numel()), ++seed);
  d.y.resize(size_t(s.output_numel()));
  d.dx.resize(d.x.size());
  d.dw.resize(d.w.size());
  d.db.resize(d.b.size());
  reference::conv2d_forward(s, d.x.data(), d.w.data(), bias ? d.b.data() : nullptr, d.y.data());
  reference::conv2d_backward(s, d.x.data(), d.w.data(), d.dy.data(), d.dx.data(), d.dw.data(),
                             d.db.data());
  return d;
}

Tensor workspace_for(Device& device, const Conv2dShape& s, bool core_default) {
  const size_t bytes = core_default ? defaults::conv2d_workspace_bytes(s)
                                    : device.conv2d_workspace_bytes(s);
  return Tensor::empty(device, {int64_t(std::max<size_t>(bytes, 1))}, DType::u8);
}

std::string describe(const Conv2dShape& s) {
  std::ostringstream o;
  o << "conv2d N=" << s.batch << " C=" << s.in_channels << " H=" << s.height << " W=" << s.width
    << " OC=" << s.out_channels << " K=" << s.kernel_h << "x" << s.kernel_w << " stride="
    << s.stride_h << "x" << s.stride_w << " pad=" << s.pad_h << "x" << s.pad_w;
  return o.str();
}

}  // namespace

TEST_CASE("conformance: conv2d forward and backward: rectangular kernels, strides and padding, "
          "no bias, null dx, the core default", "[conformance][conv2d]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 600;
    for (const Conv2dShape& s : conv_shapes())
      for (const bool bias : {true, false})
        for (const bool core_default : {false, true}) {
          INFO(describe(s) << " bias=" << bias << " core_default=" << core_default);
          const ConvData d = reference_conv(s, seed, bias);
          Tensor workspace = workspace_for(*device, s, core_default);
          const size_t off = size_t(seed % 4);  // vary the buffer offsets between shapes
          OffsetBuffer x(*device, d.x, off), w(*device, d.w, off + 1), b(*device, d.b, 2),
              y(*device, std::vector<float>(d.y.size(), kNaN), off + 3);
          const Tensor bias_t = bias ? b.tensor() : Tensor();
          if (core_default)
            defaults::conv2d_forward(*device, s, x.tensor(), w.tensor(), bias_t, y.tensor(),
                                     workspace);
          else
            device->conv2d_forward(s, x.tensor(), w.tensor(), bias_t, y.tensor(), workspace);
          TRIDENT_CHECK_CLOSE(y.values(), d.y, dot_tolerance(*device, s.patch_size()));
          CHECK(y.guard_damage() == 0);

          // Gradients start as NaN: backward overwrites them, never accumulates.
          const int64_t positions = s.batch * s.out_height() * s.out_width();
          for (const bool with_dx : {true, false}) {
            INFO("with dx " << with_dx);
            OffsetBuffer dy(*device, d.dy, off + 1),
                dx(*device, std::vector<float>(d.dx.size(), kNaN), off),
                dw(*device, std::vector<float>(d.dw.size(), kNaN), 3),
                db(*device, std::vector<float>(d.db.size(), kNaN), off + 2);
            const Tensor dx_t = with_dx ? dx.tensor() : Tensor();
            const Tensor db_t = bias ? db.tensor() : Tensor();
            if (core_default)
              defaults::conv2d_backward(*device, s, x.tensor(), w.tensor(), dy.tensor(), dx_t,
                                        dw.tensor(), db_t, workspace);
            else
              device->conv2d_backward(s, x.tensor(), w.tensor(), dy.tensor(), dx_t, dw.tensor(),
                                      db_t, workspace);
            if (with_dx)
              TRIDENT_CHECK_CLOSE(dx.values(), d.dx,
                                  dot_tolerance(*device, s.out_channels * s.kernel_h * s.kernel_w));
            TRIDENT_CHECK_CLOSE(dw.values(), d.dw, dot_tolerance(*device, positions));
            if (bias) TRIDENT_CHECK_CLOSE(db.values(), d.db, dot_tolerance(*device, positions));
            if (!with_dx) {  // untouched
              const std::vector<float> untouched = dx.values();
              CHECK(std::all_of(untouched.begin(), untouched.end(),
                                [](float v) { return std::isnan(v); }));
            }
            CHECK(dx.guard_damage() + dw.guard_damage() + db.guard_damage() == 0);
          }
          CHECK(x.guard_damage() + w.guard_damage() == 0);
        }
  }
}

TEST_CASE("conformance: conv2d backward twice, after another forward into the same workspace, "
          "and after a write to its input gives the same gradients", "[conformance][conv2d]") {
  // (the last: the float32 Winograd convolutions of CUDA and OpenCL)
  const std::vector<Conv2dShape> shapes = {conv(16, 10, 12, 12, 20, 5, 5, 1, 1, 0, 0),
                                           conv(4, 3, 9, 9, 8, 3, 3, 2, 2, 1, 1),
                                           conv(3, 16, 10, 10, 16, 3, 3, 1, 1, 1, 1)};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 650;
    for (const Conv2dShape& s : shapes) {
      INFO(describe(s));
      const ConvData d = reference_conv(s, seed, true);
      const int64_t positions = s.batch * s.out_height() * s.out_width();
      const Tolerance dw_tol = dot_tolerance(*device, positions);
      const Tolerance dx_tol = dot_tolerance(*device, s.out_channels * s.kernel_h * s.kernel_w);
      Tensor workspace = workspace_for(*device, s, false);
      Tensor x = Tensor::from_host(*device, {s.input_numel()}, d.x);
      Tensor w = Tensor::from_host(*device, {s.weight_numel()}, d.w);
      Tensor b = Tensor::from_host(*device, {s.out_channels}, d.b);
      Tensor y = Tensor::empty(*device, {s.output_numel()});
      Tensor dy = Tensor::from_host(*device, {s.output_numel()}, d.dy);
      Tensor dx = Tensor::empty(*device, {s.input_numel()}), dw = Tensor::empty(*device, {s.weight_numel()}),
             db = Tensor::empty(*device, {s.out_channels});
      auto backward_matches = [&](const char* when) {
        INFO(when);
        device->fill(dw, kNaN);
        device->fill(dx, kNaN);
        device->conv2d_backward(s, x, w, dy, dx, dw, db, workspace);
        TRIDENT_CHECK_CLOSE(dw.to_host(), d.dw, dw_tol);
        TRIDENT_CHECK_CLOSE(db.to_host(), d.db, dw_tol);
        TRIDENT_CHECK_CLOSE(dx.to_host(), d.dx, dx_tol);
      };
      device->conv2d_forward(s, x, w, b, y, workspace);
      backward_matches("first backward after the forward");
      backward_matches("second backward, no forward in between");
      // Another layer's forward through the same workspace: its columns are not x's.
      Tensor other_x = Tensor::from_host(*device, {s.input_numel()},
                                         random_floats(size_t(s.input_numel()), ++seed));
      device->conv2d_forward(s, x, w, b, y, workspace);
      device->conv2d_forward(s, other_x, w, b, y, workspace);
      backward_matches("backward after another input's forward reused the workspace");
      // A forward with another kernel: what a backend keeps of the kernel (CUDA's implicit
      // convolution: its flipped copy) is not w's.
      Tensor other_w = Tensor::from_host(*device, {s.weight_numel()},
                                         random_floats(size_t(s.weight_numel()), ++seed));
      device->conv2d_forward(s, x, other_w, b, y, workspace);
      backward_matches("backward with another kernel than the forward's");
      // An unrelated op overwrote the workspace.
      device->conv2d_forward(s, x, w, b, y, workspace);
      device->fill(workspace, 0.0f);
      backward_matches("backward after a fill of the workspace");
      // The input changed after the forward (and was put back): the columns are stale.
      device->conv2d_forward(s, x, w, b, y, workspace);
      Tensor saved = Tensor::empty(*device, {s.input_numel()});
      saved.copy_from(x);
      device->fill(x, 3.0f);
      x.copy_from(saved);
      backward_matches("backward after the input was rewritten");
      // Without dx the backend may keep the columns: two weight-only backwards agree.
      device->conv2d_forward(s, x, w, b, y, workspace);
      for (int i = 0; i < 2; ++i) {
        device->fill(dw, kNaN);
        device->conv2d_backward(s, x, w, dy, Tensor(), dw, db, workspace);
        TRIDENT_CHECK_CLOSE(dw.to_host(), d.dw, dw_tol);
      }
    }
  }
}

TEST_CASE("conformance: im2col and col2im of one sample", "[conformance][im2col]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 680;
    for (Conv2dShape s : conv_shapes()) {
      s.batch = 1;
      INFO(describe(s));
      const int64_t cols = s.patch_size() * s.out_height() * s.out_width();
      const std::vector<float> x = random_floats(size_t(s.in_channels * s.height * s.width), ++seed);
      std::vector<float> col_want(static_cast<size_t>(cols));
      reference::im2col(s, x.data(), col_want.data());
      OffsetBuffer dx(*device, x, 1), col(*device, std::vector<float>(size_t(cols), kNaN), 2);
      device->im2col(s, dx.tensor(), col.tensor());
      TRIDENT_CHECK_EXACT(col.values(), col_want);
      CHECK(col.guard_damage() == 0);

      const std::vector<float> dcol = random_floats(size_t(cols), ++seed);
      std::vector<float> dx_want(x.size());
      reference::col2im(s, dcol.data(), dx_want.data());
      OffsetBuffer ddcol(*device, dcol, 0), ddx(*device, std::vector<float>(x.size(), kNaN), 3);
      device->col2im(s, ddcol.tensor(), ddx.tensor());
      TRIDENT_CHECK_CLOSE(ddx.values(), dx_want,
                          (Tolerance{1e-6 * double(s.kernel_h * s.kernel_w), 1e-6}));
      CHECK(ddx.guard_damage() == 0);
    }
  }
}

TEST_CASE("conformance: the front rejects bad convolution shapes with a message",
          "[conformance][conv2d][front]") {
  FOR_EACH_DEVICE(device) {
    Conv2dShape s = conv(1, 2, 5, 5, 3, 3, 3, 1, 1, 0, 0);
    Tensor x = Tensor::zeros(*device, {s.input_numel()});
    Tensor w = Tensor::zeros(*device, {s.weight_numel()});
    Tensor y = Tensor::zeros(*device, {s.output_numel()});
    Tensor workspace = workspace_for(*device, s, false);
    CHECK_NOTHROW(device->conv2d_forward(s, x, w, Tensor(), y, workspace));
    Conv2dShape big_kernel = s;
    big_kernel.kernel_h = 7;
    CHECK_THROWS_WITH(device->conv2d_forward(big_kernel, x, w, Tensor(), y, workspace),
                      Catch::Contains("larger than the padded"));
    CHECK_THROWS_WITH(device->conv2d_forward(s, x, x, Tensor(), y, workspace),
                      Catch::Contains("w has 50 elements"));
    Conv2dShape zero_stride = s;
    zero_stride.stride_w = 0;
    CHECK_THROWS_WITH(device->conv2d_forward(zero_stride, x, w, Tensor(), y, workspace),
                      Catch::Contains("stride width"));
    if (device->conv2d_workspace_bytes(s) > 1) {
      Tensor small = Tensor::empty(*device, {1}, DType::u8);
      CHECK_THROWS_WITH(device->conv2d_forward(s, x, w, Tensor(), y, small),
                        Catch::Contains("workspace has 1 bytes"));
    }
  }
}
