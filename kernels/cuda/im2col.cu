// CUDA im2col (one thread per (sample, channel, output position), writing its KH*KW patch values
// down the rows so that a warp's stores are contiguous) and col2im as a gather (one thread per
// input pixel, no atomics: deterministic, in the CPU's order of additions).
#include <algorithm>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/im2col.h"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

template <typename I>
struct PatchDims {
  I c, h, w, kh, kw, sh, sw, ph, pw, oh, ow, p, rows;  // p = OH*OW, rows per sample of col
  I col_sample, col_row;  // col[n, r, p] is at n * col_sample + r * col_row + p
  Divider<I> by_c, by_h, by_w, by_p, by_ow, by_sh, by_sw;
};

template <typename I>
PatchDims<I> patch_dims(const Conv2dShape& s, int64_t rows_per_sample, int64_t samples,
                        bool folded) {
  PatchDims<I> d;
  d.c = I(s.in_channels), d.h = I(s.height), d.w = I(s.width);
  d.kh = I(s.kernel_h), d.kw = I(s.kernel_w), d.sh = I(s.stride_h), d.sw = I(s.stride_w);
  d.ph = I(s.pad_h), d.pw = I(s.pad_w), d.oh = I(s.out_height()), d.ow = I(s.out_width());
  d.p = d.oh * d.ow, d.rows = I(rows_per_sample);
  d.col_sample = folded ? d.p : d.rows * d.p;
  d.col_row = folded ? I(samples) * d.p : d.p;
  d.by_c = Divider<I>(s.in_channels), d.by_h = Divider<I>(s.height);
  d.by_w = Divider<I>(s.width), d.by_p = Divider<I>(s.out_height() * s.out_width());
  d.by_ow = Divider<I>(s.out_width());
  d.by_sh = Divider<I>(s.stride_h), d.by_sw = Divider<I>(s.stride_w);
  return d;
}

// Items [0, col_items): (n, c, p), p fastest. Items past col_items: y[n, oc, p] = bias[oc].
// Values are copied as stored (S's bits): no rounding.
template <typename S, typename I>
__global__ void im2col_kernel(PatchDims<I> d, const S* x, S* col, bool ones_row,
                              I col_items, const float* bias, I y_items, I out_channels,
                              Divider<I> by_out_channels, S* y) {
  wait_for_prior_grids();
  const I total = col_items + y_items;
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    if (i < col_items) {
      const I t = d.by_p.div(i), p = i - t * d.p;
      const I n = d.by_c.div(t), c = t - n * d.c;
      const I oh = d.by_ow.div(p), ow = p - oh * d.ow;
      const I h0 = oh * d.sh - d.ph, w0 = ow * d.sw - d.pw;
      const S* xc = x + (n * d.c + c) * d.h * d.w;
      S* out = col + n * d.col_sample + c * d.kh * d.kw * d.col_row + p;
      const S zero = from_float<S>(0.f);
      for (I kh = 0; kh < d.kh; ++kh) {
        const I h = h0 + kh;
        const bool row_inside = h >= 0 && h < d.h;
        for (I kw = 0; kw < d.kw; ++kw, out += d.col_row) {
          const I w = w0 + kw;
          *out = row_inside && w >= 0 && w < d.w ? xc[h * d.w + w] : zero;
        }
      }
      if (ones_row && c == 0)
        col[n * d.col_sample + (d.rows - 1) * d.col_row + p] = from_float<S>(1.f);
    } else {
      const I j = i - col_items;  // y[n, oc, p]
      const I q = d.by_p.div(j);  // n * OC + oc
      y[j] = from_float<S>(bias[q - by_out_channels.div(q) * out_channels]);
    }
  }
}

// dx[n, c, h, w]: kernel rows kh = (h + PH) mod SH, + SH, ... meet output rows
// oh = (h + PH - kh) / SH, one lower each step; likewise for the columns.
template <typename S, typename I>
__global__ void col2im_kernel(PatchDims<I> d, const S* col, I total, S* dx) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I t = d.by_w.div(i), w = i - t * d.w;
    const I t2 = d.by_h.div(t), h = t - t2 * d.h;
    const I n = d.by_c.div(t2), c = t2 - n * d.c;
    const S* col_nc = col + n * d.col_sample + c * d.kh * d.kw * d.col_row;
    const I hp = h + d.ph, wp = w + d.pw;
    const I oh_first = d.by_sh.div(hp), kh_first = hp - oh_first * d.sh;
    const I ow_first = d.by_sw.div(wp), kw_first = wp - ow_first * d.sw;
    float sum = 0.f;
    for (I kh = kh_first, oh = oh_first; kh < d.kh && oh >= 0; kh += d.sh, --oh) {
      if (oh >= d.oh) continue;
      for (I kw = kw_first, ow = ow_first; kw < d.kw && ow >= 0; kw += d.sw, --ow) {
        if (ow >= d.ow) continue;
        sum += to_float(col_nc[(kh * d.kw + kw) * d.col_row + oh * d.ow + ow]);
      }
    }
    dx[i] = from_float<S>(sum);
  }
}

// The KH*KW patch rows of Q adjacent columns, each row's Q values one Pack at out (rows col_row
// apart): value e of row (kh, kw) is x[base[e] + h * W + w] at (h, w) = (h0[e] + kh, w0[e] + kw),
// zero outside the image; then, when ones, a Pack of ones at ones_out.
template <typename S, typename I, int Q>
__device__ __forceinline__ void write_patch_packs(const PatchDims<I>& d, const S* x,
                                                  const I (&base)[Q], const I (&h0)[Q],
                                                  const I (&w0)[Q], S* out, bool ones,
                                                  S* ones_out) {
  const S zero = from_float<S>(0.f);
  for (I kh = 0; kh < d.kh; ++kh)
    for (I kw = 0; kw < d.kw; ++kw, out += d.col_row) {
      Pack<S, Q> pack;
#pragma unroll
      for (int e = 0; e < Q; ++e) {
        const I h = h0[e] + kh, w = w0[e] + kw;
        pack.v[e] = h >= 0 && h < d.h && w >= 0 && w < d.w ? x[base[e] + h * d.w + w] : zero;
      }
      *reinterpret_cast<Pack<S, Q>*>(out) = pack;
    }
  if (ones) {
    Pack<S, Q> pack;
#pragma unroll
    for (int e = 0; e < Q; ++e) pack.v[e] = from_float<S>(1.f);
    *reinterpret_cast<Pack<S, Q>*>(ones_out) = pack;
  }
}

// im2col with Q adjacent positions per thread, each row's Q values written as one Pack (P a
// multiple of Q, col aligned): items (n, c, p / Q). No bias items. The one-value kernel wrote 2
// bytes a thread a row in bf16: 340 us of a 2.3 ms ResNet step on an H100.
template <typename S, typename I, int Q>
__global__ void im2col_packed_kernel(PatchDims<I> d, const S* x, S* col, bool ones_row,
                                     I items, Divider<I> by_packs) {
  wait_for_prior_grids();
  const I packs = d.p / I(Q);
  for (I i = first_index<I>(); i < items; i += grid_step<I>()) {
    const I t = by_packs.div(i), p0 = (i - t * packs) * I(Q);
    const I n = d.by_c.div(t), c = t - n * d.c;
    I base[Q], h0[Q], w0[Q];
    I oh = d.by_ow.div(p0), ow = p0 - oh * d.ow;
#pragma unroll
    for (int e = 0; e < Q; ++e) {
      base[e] = (n * d.c + c) * d.h * d.w;
      h0[e] = oh * d.sh - d.ph, w0[e] = ow * d.sw - d.pw;
      if (++ow == d.ow) ow = 0, ++oh;
    }
    write_patch_packs<S, I, Q>(d, x, base, h0, w0,
                               col + n * d.col_sample + c * d.kh * d.kw * d.col_row + p0,
                               ones_row && c == 0,
                               col + n * d.col_sample + (d.rows - 1) * d.col_row + p0);
  }
}

// col2im with Q adjacent input pixels of a row per thread (W a multiple of Q, dx aligned), each
// summed as col2im_kernel sums it, written as one Pack: items (n, c, h, w / Q).
template <typename S, typename I, int Q>
__global__ void col2im_packed_kernel(PatchDims<I> d, const S* col, I items, Divider<I> by_packs,
                                     S* dx) {
  wait_for_prior_grids();
  const I packs = d.w / I(Q);
  for (I i = first_index<I>(); i < items; i += grid_step<I>()) {
    const I t = by_packs.div(i), w_first = (i - t * packs) * I(Q);
    const I t2 = d.by_h.div(t), h = t - t2 * d.h;
    const I n = d.by_c.div(t2), c = t2 - n * d.c;
    const S* col_nc = col + n * d.col_sample + c * d.kh * d.kw * d.col_row;
    const I hp = h + d.ph;
    const I oh_first = d.by_sh.div(hp), kh_first = hp - oh_first * d.sh;
    float sum[Q];
#pragma unroll
    for (int e = 0; e < Q; ++e) sum[e] = 0.f;
    for (I kh = kh_first, oh = oh_first; kh < d.kh && oh >= 0; kh += d.sh, --oh) {
      if (oh >= d.oh) continue;
      const S* row = col_nc + kh * d.kw * d.col_row + oh * d.ow;
#pragma unroll
      for (int e = 0; e < Q; ++e) {
        const I wp = w_first + I(e) + d.pw;
        const I ow_first = d.by_sw.div(wp), kw_first = wp - ow_first * d.sw;
        for (I kw = kw_first, ow = ow_first; kw < d.kw && ow >= 0; kw += d.sw, --ow) {
          if (ow >= d.ow) continue;
          sum[e] += to_float(row[kw * d.col_row + ow]);
        }
      }
    }
    Pack<S, Q> pack;
#pragma unroll
    for (int e = 0; e < Q; ++e) pack.v[e] = from_float<S>(sum[e]);
    *reinterpret_cast<Pack<S, Q>*>(dx + ((n * d.c + c) * d.h + h) * d.w + w_first) = pack;
  }
}

// Folded im2col (col[r, n * P + p]) with Q adjacent columns per thread where P is not a multiple
// of Q (the ResNet's 7x7 layers): a pack may span two samples, each value finds its own sample
// and position. Items (c, pack of columns), columns fastest. The one-value kernel wrote 2 bytes
// a thread a row: on an H100 (bf16, batch 256) the 7x7 128->128 im2col took 33.5 us, now 14.0,
// the stride-2 14x14 -> 7x7 one 17.3, now 10.2 (ResNet step 1.459 -> 1.440 ms, fp32 3.759 ->
// 3.739). The same idea for col2im (packs of dx across rows, each value finding its own
// (n, c, h, w)) was slower: 33.1 against 25.2 us at 7x7, fewer threads each doing eight sums.
template <typename S, typename I, int Q>
__global__ void im2col_folded_packed_kernel(PatchDims<I> d, const S* x, S* col, bool ones_row,
                                            I items, I packs_per_row,
                                            Divider<I> by_packs_per_row) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < items; i += grid_step<I>()) {
    const I c = by_packs_per_row.div(i), j0 = (i - c * packs_per_row) * I(Q);
    I base[Q], h0[Q], w0[Q];
    I n = d.by_p.div(j0), p = j0 - n * d.p;
    I oh = d.by_ow.div(p), ow = p - oh * d.ow;
#pragma unroll
    for (int e = 0; e < Q; ++e) {
      base[e] = (n * d.c + c) * d.h * d.w;
      h0[e] = oh * d.sh - d.ph, w0[e] = ow * d.sw - d.pw;
      if (++ow == d.ow) {
        ow = 0;
        if (++oh == d.oh) oh = 0, ++n;
      }
    }
    write_patch_packs<S, I, Q>(d, x, base, h0, w0, col + c * d.kh * d.kw * d.col_row + j0,
                               ones_row && c == 0, col + (d.rows - 1) * d.col_row + j0);
  }
}

// The widest pack (16 bytes at most, of elements of `element` bytes) dividing `run` whose
// accesses `p` allows.
int pack_for(int64_t run, const void* p, size_t element) {
  int q = int(16 / element);
  while (q > 1 && (run % q != 0 || !pack_aligned(p, q * element))) q /= 2;
  return q;
}

// dst[c, n * P + p] = src[n, c, p] (to_channels) or the reverse with the bias added; one thread
// per Q adjacent elements of dst (P a multiple of Q, both pointers aligned: one Pack each way),
// p fastest, so that both sides are read and written in runs of P. total counts packs, positions
// are in packs.
template <typename S, typename I, int Q>
__global__ void fold_kernel(const S* src, const float* bias, I total, I channels, I positions,
                            I samples, Divider<I> by_p, Divider<I> by_c, Divider<I> by_n,
                            bool to_channels, S* dst) {
  wait_for_prior_grids();
  using P = Pack<S, Q>;
  const P* from = reinterpret_cast<const P*>(src);
  P* to = reinterpret_cast<P*>(dst);
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I t = by_p.div(i), p = i - t * positions;
    if (to_channels) {  // i = (c, n, p)
      const I c = by_n.div(t), n = t - c * samples;
      to[i] = from[(n * channels + c) * positions + p];
    } else {  // i = (n, c, p)
      const I n = by_c.div(t), c = t - n * channels;
      P v = from[(c * samples + n) * positions + p];
      if (bias)
#pragma unroll
        for (int e = 0; e < Q; ++e) v.v[e] = from_float<S>(to_float(v.v[e]) + bias[c]);
      to[i] = v;
    }
  }
}

// The same where P is not a multiple of the pack (the 7x7 layers): one thread per Q adjacent
// elements of dst, which may span runs (each value finds its own source), written as one Pack;
// the reads are single values. total counts packs, positions are elements.
template <typename S, typename I, int Q>
__global__ void fold_packed_dst_kernel(const S* src, const float* bias, I total, I channels,
                                       I positions, I samples, Divider<I> by_p,
                                       Divider<I> by_c, Divider<I> by_n, bool to_channels,
                                       S* dst) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I first = i * I(Q);
    const I t = by_p.div(first);
    I p = first - t * positions, outer, inner;  // to_channels: (c, n); else (n, c)
    if (to_channels)
      outer = by_n.div(t), inner = t - outer * samples;
    else
      outer = by_c.div(t), inner = t - outer * channels;
    Pack<S, Q> pack;
#pragma unroll
    for (int e = 0; e < Q; ++e) {
      if (to_channels) {  // dst[c, n, p] = src[n, c, p]
        pack.v[e] = src[(inner * channels + outer) * positions + p];
      } else {  // dst[n, c, p] = src[c, n, p] + bias[c]
        const S v = src[(inner * samples + outer) * positions + p];
        pack.v[e] = bias ? from_float<S>(to_float(v) + bias[inner]) : v;
      }
      if (++p == positions) {
        p = 0;
        if (++inner == (to_channels ? samples : channels)) inner = 0, ++outer;
      }
    }
    *reinterpret_cast<Pack<S, Q>*>(dst + first) = pack;
  }
}

void launch_fold(const KernelContext& ctx, DType dtype, const void* src, const float* bias,
                 int64_t samples, int64_t channels, int64_t positions, bool to_channels,
                 void* dst) {
  const int64_t total = samples * channels * positions;
  if (total <= 0) return;
  with_float_type(dtype, [&](auto tag) {
    using S = decltype(tag);
    auto run = [&](auto zero, auto width) {
      using I = decltype(zero);
      constexpr int Q = decltype(width)::value;
      const int64_t packs = total / Q, run_packs = positions / Q;
      launch(ctx, fold_kernel<S, I, Q>, grid_for(packs), kBlockThreads, 0,
             static_cast<const S*>(src), bias, I(packs), I(channels), I(run_packs), I(samples),
             Divider<I>(run_packs), Divider<I>(channels), Divider<I>(samples), to_channels,
             static_cast<S*>(dst));
    };
    auto with_width = [&](auto zero) {
      const int q =
          std::min(pack_for(positions, src, sizeof(S)), pack_for(positions, dst, sizeof(S)));
      const int q_dst = q == 1 ? pack_for(total, dst, sizeof(S)) : 1;
      // Odd runs: packs of dst across them (H100, bf16, the 7x7 128-channel transposes 7.9 ->
      // 4.6 us; ResNet step 1.376 -> 1.364 ms).
      if (q_dst > 1) {
        using I = decltype(zero);
        with_pack_width<sizeof(S)>(q_dst, [&](auto width) {
          constexpr int Q = decltype(width)::value;
          launch(ctx, fold_packed_dst_kernel<S, I, Q>, grid_for(total / Q), kBlockThreads, 0,
                 static_cast<const S*>(src), bias, I(total / Q), I(channels), I(positions),
                 I(samples), Divider<I>(positions), Divider<I>(channels), Divider<I>(samples),
                 to_channels, static_cast<S*>(dst));
        });
        return;
      }
      with_pack_width<sizeof(S)>(q, [&](auto width) { run(zero, width); });
    };
    if (fits_int32(total)) with_width(int32_t(0)); else with_width(int64_t(0));
  });
}

// Whether the int32 kernels hold every coordinate sum (h + pad, o * stride + kernel).
bool coordinates_fit(const Conv2dShape& s) {
  return fits_int32(s.height + s.width + 2 * (s.pad_h + s.pad_w) + s.kernel_h + s.kernel_w +
                    s.stride_h + s.stride_w);
}

template <typename I>
void im2col_as(const KernelContext& ctx, const Conv2dShape& s, int64_t samples, const void* x,
               void* col, int64_t rows_per_sample, bool ones_row, const float* bias, void* y,
               int64_t col_items, int64_t y_items, bool folded) {
  with_float_type(s.dtype, [&](auto tag) {
    using S = decltype(tag);
    const PatchDims<I> d = patch_dims<I>(s, rows_per_sample, samples, folded);
    const int q = y_items == 0 ? pack_for(d.p, col, sizeof(S)) : 1;
    // Folded columns whose samples' runs P do not take packs: packs across samples, where the
    // whole row (samples * P, also the row stride) does.
    const int q_folded =
        folded && y_items == 0 && q == 1 ? pack_for(int64_t(samples) * d.p, col, sizeof(S)) : 1;
    if (q_folded > 1) {
      with_pack_width<sizeof(S)>(q_folded, [&](auto width) {
        constexpr int Q = decltype(width)::value;
        const int64_t packs_per_row = samples * d.p / Q, items = s.in_channels * packs_per_row;
        launch(ctx, im2col_folded_packed_kernel<S, I, Q>, grid_for(items), kBlockThreads, 0, d,
               static_cast<const S*>(x), static_cast<S*>(col), ones_row, I(items),
               I(packs_per_row), Divider<I>(packs_per_row));
      });
      return;
    }
    with_pack_width<sizeof(S)>(q, [&](auto width) {
      constexpr int Q = decltype(width)::value;
      if constexpr (Q == 1) {  // one value a thread, and the bias items
        launch(ctx, im2col_kernel<S, I>, grid_for(col_items + y_items), kBlockThreads, 0, d,
               static_cast<const S*>(x), static_cast<S*>(col), ones_row, I(col_items), bias,
               I(y_items), I(s.out_channels), Divider<I>(s.out_channels), static_cast<S*>(y));
      } else {
        const int64_t items = col_items / Q;
        launch(ctx, im2col_packed_kernel<S, I, Q>, grid_for(items), kBlockThreads, 0, d,
               static_cast<const S*>(x), static_cast<S*>(col), ones_row, I(items),
               Divider<I>(d.p / Q));
      }
    });
  });
}

}  // namespace

void launch_im2col(const KernelContext& ctx, const Conv2dShape& s, int64_t samples,
                   const void* x, void* col, int64_t rows_per_sample, bool ones_row,
                   const float* bias, void* y, bool folded) {
  const int64_t positions = s.out_height() * s.out_width();
  const int64_t col_items = col ? samples * s.in_channels * positions : 0;
  const int64_t y_items = bias ? samples * s.out_channels * positions : 0;
  if (col_items + y_items <= 0) return;
  const int64_t largest = std::max({col_items + y_items, samples * rows_per_sample * positions,
                                    samples * s.in_channels * s.height * s.width});
  if (fits_int32(largest) && coordinates_fit(s))
    im2col_as<int32_t>(ctx, s, samples, x, col, rows_per_sample, ones_row, bias, y, col_items,
                       y_items, folded);
  else
    im2col_as<int64_t>(ctx, s, samples, x, col, rows_per_sample, ones_row, bias, y, col_items,
                       y_items, folded);
}

void launch_col2im(const KernelContext& ctx, const Conv2dShape& s, int64_t samples,
                   const void* col, int64_t rows_per_sample, void* dx, bool folded) {
  const int64_t total = samples * s.in_channels * s.height * s.width;
  if (total <= 0) return;
  const int64_t col_size = samples * rows_per_sample * s.out_height() * s.out_width();
  with_float_type(s.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* cols = static_cast<const S*>(col);
    S* out = static_cast<S*>(dx);
    const bool small = fits_int32(std::max(total, col_size)) && coordinates_fit(s);
    const int q = small ? pack_for(s.width, dx, sizeof(S)) : 1;
    with_pack_width<sizeof(S)>(q, [&](auto width) {
      constexpr int Q = decltype(width)::value;
      if constexpr (Q > 1) {
        const int64_t items = total / Q;
        launch(ctx, col2im_packed_kernel<S, int32_t, Q>, grid_for(items), kBlockThreads, 0,
               patch_dims<int32_t>(s, rows_per_sample, samples, folded), cols, int32_t(items),
               Divider<int32_t>(int32_t(s.width / Q)), out);
      } else if (small) {
        launch(ctx, col2im_kernel<S, int32_t>, grid_for(total), kBlockThreads, 0,
               patch_dims<int32_t>(s, rows_per_sample, samples, folded), cols, int32_t(total),
               out);
      } else {
        launch(ctx, col2im_kernel<S, int64_t>, grid_for(total), kBlockThreads, 0,
               patch_dims<int64_t>(s, rows_per_sample, samples, folded), cols, total, out);
      }
    });
  });
}

void launch_channels_first(const KernelContext& ctx, DType dtype, const void* src, int64_t samples,
                           int64_t channels, int64_t positions, void* dst) {
  launch_fold(ctx, dtype, src, nullptr, samples, channels, positions, true, dst);
}

void launch_samples_first(const KernelContext& ctx, DType dtype, const void* src,
                          const float* bias, int64_t samples, int64_t channels,
                          int64_t positions, void* dst) {
  launch_fold(ctx, dtype, src, bias, samples, channels, positions, false, dst);
}

}  // namespace trident::cuda
