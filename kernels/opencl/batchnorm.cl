// Batch normalisation over x viewed as [outer, channels, inner] (BatchNormShape), in float with
// Welford's update per work-item and Chan's combination across work-items and pieces (never
// E[x^2] - E[x]^2, which cancels), so that statistics sit within about 1e-7 of a float64
// reference however large the mean. x, y, dx and dy are act_t (storage.cl); parameters,
// statistics and partial sums float. relu (BatchNormShape::relu): y = max(normalised, 0), and
// the backward reads y to take dy through that ReLU first (0 where y is not > 0).
//
// A channel's values are cut into pieces as in channel.cl (RunCursor). With one piece per
// channel a work-group does the whole channel: statistics, then the normalisation or the input
// gradient (one launch). With several, groups write partial statistics to `partial`, a finish
// kernel combines them per channel in piece order, and an elementwise kernel applies them.

// Statistics of a set of values: count n, mean, m2 = the sum of squared deviations.
typedef struct {
  float n, mean, m2;
} Moments;

Moments moments_combine(Moments a, Moments b) {
  Moments r;
  r.n = a.n + b.n;
  if (r.n == 0.0f) return a;
  const float delta = b.mean - a.mean, weight = b.n / r.n;
  r.mean = a.mean + delta * weight;
  r.m2 = a.m2 + b.m2 + delta * delta * a.n * weight;
  return r;
}

// The moments of one work-item's values of channel c in positions [k0 + lid, k1) step group.
Moments moments_of_run(__global const act_t* x, uint channels, uint inner, uint c,
                       uint k0, uint k1) {
  Moments m = {0.0f, 0.0f, 0.0f};
  RunCursor r = run_cursor(k0 + get_local_id(0), inner, REDUCE_GROUP);
  for (uint k = k0 + get_local_id(0); k < k1; k += REDUCE_GROUP, run_advance(&r, inner)) {
    const float v = LOAD(x, run_at(&r, channels, c, inner));
    m.n += 1.0f;
    const float d = v - m.mean;
    m.mean += d / m.n;
    m.m2 += d * (v - m.mean);
  }
  return m;
}

// The work-group's moments, combined by a fixed tree; every work-item gets the result.
Moments group_moments(Moments mine, __local float* n, __local float* mean,
                      __local float* m2) {
  const uint lid = get_local_id(0);
  n[lid] = mine.n;
  mean[lid] = mine.mean;
  m2[lid] = mine.m2;
  for (uint width = REDUCE_GROUP / 2; width > 0; width >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < width) {
      const Moments a = {n[lid], mean[lid], m2[lid]};
      const Moments b = {n[lid + width], mean[lid + width], m2[lid + width]};
      const Moments r = moments_combine(a, b);
      n[lid] = r.n;
      mean[lid] = r.mean;
      m2[lid] = r.m2;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const Moments all = {n[0], mean[0], m2[0]};
  return all;
}

// The batch statistics of channel c from its moments: save_mean, save_invstd = 1/sqrt(var +
// eps) (biased variance), and the running statistics (unbiased variance).
void store_batch_stats(Moments m, uint c, float eps, float momentum,
                       __global float* running_mean, ulong running_mean_off,
                       __global float* running_var, ulong running_var_off,
                       __global float* save_mean, ulong save_mean_off,
                       __global float* save_invstd, ulong save_invstd_off) {
  const float var = m.m2 / m.n;
  save_mean[save_mean_off + c] = m.mean;
  save_invstd[save_invstd_off + c] = 1.0f / sqrt(var + eps);
  const float unbiased = m.m2 / (m.n - 1.0f);
  running_mean[running_mean_off + c] =
      (1.0f - momentum) * running_mean[running_mean_off + c] + momentum * m.mean;
  running_var[running_var_off + c] =
      (1.0f - momentum) * running_var[running_var_off + c] + momentum * unbiased;
}

// y = x * a + b with a = invstd * gamma, b = beta - mean * a, for channel c's values from the
// cursor position k0 + lid on; has_residual: + residual (batchnorm_add_forward), before the ReLU.
void normalize_run(__global const act_t* x, __global act_t* y, uint channels, uint inner,
                   uint c, uint k0, uint k1, float a, float b, int relu,
                   __global const act_t* residual, int has_residual) {
  RunCursor r = run_cursor(k0 + get_local_id(0), inner, REDUCE_GROUP);
  for (uint k = k0 + get_local_id(0); k < k1; k += REDUCE_GROUP, run_advance(&r, inner)) {
    const uint at = run_at(&r, channels, c, inner);
    float v = LOAD(x, at) * a + b;
    if (has_residual) v += LOAD(residual, at);  // not + 0 without one: -0 would become +0
    STORE(y, at, relu && v < 0.0f ? 0.0f : v);  // a NaN stays NaN, as the unary relu keeps it
  }
}

// g through the fused ReLU when relu: 0 where the forward's output x * a + b (a = invstd *
// gamma, b = beta - mean * a, as batchnorm_normalize computes them) is not > 0.
float relu_gradient(float g, float x, float a, float b, int relu) {
  return relu && !(x * a + b > 0.0f) ? 0.0f : g;
}

// The forward's a and b of a channel (see relu_gradient) from the saved statistics.
float2 forward_affine(float mean, float invstd, __global const float* gamma, ulong gamma_off,
                      int has_gamma, __global const float* beta, ulong beta_off, int has_beta,
                      uint c) {
  const float a = invstd * (has_gamma ? gamma[gamma_off + c] : 1.0f);
  return (float2)(a, (has_beta ? beta[beta_off + c] : 0.0f) - mean * a);
}

// Training with one piece per channel: work-group c computes channel c's statistics, stores
// them and normalises the channel.
__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void batchnorm_forward_channel(__global const act_t* x, ulong x_off, __global const float* gamma,
                               ulong gamma_off, int has_gamma, __global const float* beta,
                               ulong beta_off, int has_beta, __global float* running_mean,
                               ulong running_mean_off, __global float* running_var,
                               ulong running_var_off, __global act_t* y, ulong y_off,
                               __global float* save_mean, ulong save_mean_off,
                               __global float* save_invstd, ulong save_invstd_off, uint outer,
                               uint channels, uint inner, float eps, float momentum, int relu,
                               __global const act_t* residual, ulong residual_off,
                               int has_residual) {
  __local float n[REDUCE_GROUP], mean[REDUCE_GROUP], m2[REDUCE_GROUP];
  const uint c = get_group_id(0), values = outer * inner;
  const Moments m = group_moments(moments_of_run(x + x_off, channels, inner, c, 0, values), n,
                                  mean, m2);
  if (get_local_id(0) == 0)
    store_batch_stats(m, c, eps, momentum, running_mean, running_mean_off, running_var,
                      running_var_off, save_mean, save_mean_off, save_invstd, save_invstd_off);
  const float a = (has_gamma ? gamma[gamma_off + c] : 1.0f) / sqrt(m.m2 / m.n + eps);
  const float b = (has_beta ? beta[beta_off + c] : 0.0f) - m.mean * a;
  normalize_run(x + x_off, y + y_off, channels, inner, c, 0, values, a, b, relu,
                residual + residual_off, has_residual);
}

// Training with several pieces per channel: the moments of piece (group id / channels) of
// channel (group id % channels) go to partial[(piece * channels + c) * 3 + {0, 1, 2}].
__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void batchnorm_moments(__global const act_t* x, ulong x_off, uint outer, uint channels,
                       uint inner, uint per_piece, __global float* partial,
                       ulong partial_off) {
  __local float n[REDUCE_GROUP], mean[REDUCE_GROUP], m2[REDUCE_GROUP];
  const uint c = get_group_id(0) % channels, piece = get_group_id(0) / channels;
  const uint k0 = piece * per_piece, k1 = min(outer * inner, k0 + per_piece);
  const Moments m = group_moments(moments_of_run(x + x_off, channels, inner, c, k0, k1), n,
                                  mean, m2);
  if (get_local_id(0) != 0) return;
  __global float* out = partial + partial_off + (piece * channels + c) * 3;
  out[0] = m.n;
  out[1] = m.mean;
  out[2] = m.m2;
}

// One work-item per channel: the pieces' moments combined in piece order, then the statistics.
__kernel void batchnorm_moments_finish(__global const float* partial, ulong partial_off,
                                       uint pieces, uint channels,
                                       float eps, float momentum, __global float* running_mean,
                                       ulong running_mean_off, __global float* running_var,
                                       ulong running_var_off, __global float* save_mean,
                                       ulong save_mean_off, __global float* save_invstd,
                                       ulong save_invstd_off) {
  const uint c = get_global_id(0);
  if (c >= channels) return;
  Moments m = {0.0f, 0.0f, 0.0f};
  for (uint p = 0; p < pieces; ++p) {
    __global const float* in = partial + partial_off + (p * channels + c) * 3;
    const Moments piece = {in[0], in[1], in[2]};
    m = moments_combine(m, piece);
  }
  store_batch_stats(m, c, eps, momentum, running_mean, running_mean_off, running_var,
                    running_var_off, save_mean, save_mean_off, save_invstd, save_invstd_off);
}

// y = (x - mean[c]) * invstd[c] * gamma[c] + beta[c], elementwise. Training passes the batch's
// save_mean / save_invstd (stats_are_var == 0); evaluation the running mean and variance
// (stats_are_var: invstd = 1/sqrt(var + eps)).
__kernel void batchnorm_normalize(__global const act_t* x, ulong x_off,
                                  __global const float* gamma, ulong gamma_off, int has_gamma,
                                  __global const float* beta, ulong beta_off, int has_beta,
                                  __global const float* mean, ulong mean_off,
                                  __global const float* spread, ulong spread_off,
                                  int stats_are_var, float eps, __global act_t* y, ulong y_off,
                                  uint n, uint channels, uint inner, int relu,
                                  __global const act_t* residual, ulong residual_off,
                                  int has_residual) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const uint c = (i / inner) % channels;
  const float s = spread[spread_off + c];
  const float invstd = stats_are_var ? 1.0f / sqrt(s + eps) : s;
  const float2 affine = forward_affine(mean[mean_off + c], invstd, gamma, gamma_off, has_gamma,
                                       beta, beta_off, has_beta, c);
  float v = LOAD(x, x_off + i) * affine.x + affine.y;
  if (has_residual) v += LOAD(residual, residual_off + i);
  STORE(y, y_off + i, relu && v < 0.0f ? 0.0f : v);
}

// ---- backward: dx = k * (dy - sum(dy) / n - xhat * sum(dy * xhat) / n), k = gamma * invstd,
// xhat = (x - mean) * invstd; dgamma = sum(dy * xhat), dbeta = sum(dy).

// One work-item's Kahan sums of dy and dy * (x - mean) over channel c's positions [k0, k1);
// relu: dy through the fused ReLU, whose forward was x * affine.x + affine.y.
float2 gradient_sums_of_run(__global const act_t* x, __global const act_t* dy, float2 affine,
                            int relu, uint channels, uint inner, uint c, uint k0, uint k1,
                            float mean) {
  float s0 = 0.0f, c0 = 0.0f, s1 = 0.0f, c1 = 0.0f;
  RunCursor r = run_cursor(k0 + get_local_id(0), inner, REDUCE_GROUP);
  for (uint k = k0 + get_local_id(0); k < k1; k += REDUCE_GROUP, run_advance(&r, inner)) {
    const uint at = run_at(&r, channels, c, inner);
    const float xv = LOAD(x, at);
    const float g = relu_gradient(LOAD(dy, at), xv, affine.x, affine.y, relu);
    kahan_add(&s0, &c0, g);
    kahan_add(&s1, &c1, g * (xv - mean));
  }
  return (float2)(s0, s1);
}

// dgamma, dbeta (where wanted) and the dx coefficients (sum(dy) / n, sum(dy * xhat) / n) of
// channel c from its sums (sum dy, sum dy * (x - mean)).
float2 finish_gradient_sums(float2 sums, uint c, float invstd, float count,
                            __global float* dgamma, ulong dgamma_off, int has_dgamma,
                            __global float* dbeta, ulong dbeta_off, int has_dbeta) {
  const float sum_dy_xhat = sums.y * invstd;
  if (has_dgamma) dgamma[dgamma_off + c] = sum_dy_xhat;
  if (has_dbeta) dbeta[dbeta_off + c] = sums.x;
  return (float2)(sums.x / count, sum_dy_xhat / count);
}

// dx for channel c's positions [k0, k1) from the coefficients.
void input_gradient_run(__global const act_t* x, __global const act_t* dy, float2 affine,
                        int relu, __global act_t* dx, uint channels, uint inner, uint c, uint k0,
                        uint k1, float mean, float invstd, float k_scale, float2 coef) {
  RunCursor r = run_cursor(k0 + get_local_id(0), inner, REDUCE_GROUP);
  for (uint k = k0 + get_local_id(0); k < k1; k += REDUCE_GROUP, run_advance(&r, inner)) {
    const uint at = run_at(&r, channels, c, inner);
    const float xv = LOAD(x, at), xhat = (xv - mean) * invstd;
    const float g = relu_gradient(LOAD(dy, at), xv, affine.x, affine.y, relu);
    STORE(dx, at, k_scale * (g - coef.x - xhat * coef.y));
  }
}

// One piece per channel: work-group c sums channel c, writes dgamma / dbeta, then dx.
__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void batchnorm_backward_channel(__global const act_t* x, ulong x_off, __global const act_t* dy,
                                ulong dy_off, __global const float* gamma, ulong gamma_off,
                                int has_gamma, __global const float* save_mean,
                                ulong save_mean_off, __global const float* save_invstd,
                                ulong save_invstd_off, __global act_t* dx, ulong dx_off,
                                __global float* dgamma, ulong dgamma_off, int has_dgamma,
                                __global float* dbeta, ulong dbeta_off, int has_dbeta,
                                uint outer, uint channels, uint inner,
                                __global const float* beta, ulong beta_off, int has_beta,
                                int relu) {
  __local float a[REDUCE_GROUP], b[REDUCE_GROUP];
  const uint c = get_group_id(0), values = outer * inner;
  const float mean = save_mean[save_mean_off + c], invstd = save_invstd[save_invstd_off + c];
  const float2 affine = forward_affine(mean, invstd, gamma, gamma_off, has_gamma, beta,
                                       beta_off, has_beta, c);
  const float2 sums = local_sum2(gradient_sums_of_run(x + x_off, dy + dy_off, affine, relu,
                                                      channels, inner, c, 0, values, mean),
                                 a, b);
  const float2 coef = finish_gradient_sums(sums, c, invstd, (float)values,
                                           dgamma, dgamma_off, has_dgamma && get_local_id(0) == 0,
                                           dbeta, dbeta_off, has_dbeta && get_local_id(0) == 0);
  const float k_scale = (has_gamma ? gamma[gamma_off + c] : 1.0f) * invstd;
  input_gradient_run(x + x_off, dy + dy_off, affine, relu, dx + dx_off, channels, inner, c, 0,
                     values, mean, invstd, k_scale, coef);
}

// Several pieces per channel: the sums of piece (group id / channels) of channel
// (group id % channels) go to partial[(piece * channels + c) * 2 + {0, 1}].
__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void batchnorm_gradient_sums(__global const act_t* x, ulong x_off, __global const act_t* dy,
                             ulong dy_off, __global const float* save_mean, ulong save_mean_off,
                             uint outer, uint channels, uint inner, uint per_piece,
                             __global float* partial, ulong partial_off,
                             __global const float* save_invstd, ulong save_invstd_off,
                             __global const float* gamma, ulong gamma_off, int has_gamma,
                             __global const float* beta, ulong beta_off, int has_beta,
                             int relu) {
  __local float a[REDUCE_GROUP], b[REDUCE_GROUP];
  const uint c = get_group_id(0) % channels, piece = get_group_id(0) / channels;
  const uint k0 = piece * per_piece, k1 = min(outer * inner, k0 + per_piece);
  const float mean = save_mean[save_mean_off + c];
  const float2 affine = forward_affine(mean, save_invstd[save_invstd_off + c], gamma, gamma_off,
                                       has_gamma, beta, beta_off, has_beta, c);
  const float2 sums = local_sum2(gradient_sums_of_run(x + x_off, dy + dy_off, affine, relu,
                                                      channels, inner, c, k0, k1, mean),
                                 a, b);
  if (get_local_id(0) != 0) return;
  partial[partial_off + (piece * channels + c) * 2] = sums.x;
  partial[partial_off + (piece * channels + c) * 2 + 1] = sums.y;
}

// One work-item per channel: the pieces' sums in piece order, dgamma / dbeta, and the dx
// coefficients to coef[c * 2 + {0, 1}].
__kernel void batchnorm_gradient_finish(__global const float* partial, ulong partial_off,
                                        uint pieces,
                                        uint channels, uint count,
                                        __global const float* save_invstd,
                                        ulong save_invstd_off, __global float* dgamma,
                                        ulong dgamma_off, int has_dgamma, __global float* dbeta,
                                        ulong dbeta_off, int has_dbeta, __global float* coef,
                                        ulong coef_off) {
  const uint c = get_global_id(0);
  if (c >= channels) return;
  float s0 = 0.0f, c0 = 0.0f, s1 = 0.0f, c1 = 0.0f;
  for (uint p = 0; p < pieces; ++p) {
    kahan_add(&s0, &c0, partial[partial_off + (p * channels + c) * 2]);
    kahan_add(&s1, &c1, partial[partial_off + (p * channels + c) * 2 + 1]);
  }
  const float2 k = finish_gradient_sums((float2)(s0, s1), c,
                                        save_invstd[save_invstd_off + c], (float)count, dgamma,
                                        dgamma_off, has_dgamma, dbeta, dbeta_off, has_dbeta);
  coef[coef_off + c * 2] = k.x;
  coef[coef_off + c * 2 + 1] = k.y;
}

// dx elementwise from the per-channel coefficients; dx may be dy.
__kernel void batchnorm_input_gradient(__global const act_t* x, ulong x_off,
                                       __global const act_t* dy, ulong dy_off,
                                       __global const float* gamma, ulong gamma_off,
                                       int has_gamma, __global const float* save_mean,
                                       ulong save_mean_off, __global const float* save_invstd,
                                       ulong save_invstd_off, __global const float* coef,
                                       ulong coef_off,
                                       __global act_t* dx, ulong dx_off, uint n, uint channels,
                                       uint inner, __global const float* beta, ulong beta_off,
                                       int has_beta, int relu) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const uint c = (i / inner) % channels;
  const float invstd = save_invstd[save_invstd_off + c], mean = save_mean[save_mean_off + c];
  const float xv = LOAD(x, x_off + i), xhat = (xv - mean) * invstd;
  const float k_scale = (has_gamma ? gamma[gamma_off + c] : 1.0f) * invstd;
  const float k0 = coef[coef_off + c * 2], k1 = coef[coef_off + c * 2 + 1];
  const float2 affine = forward_affine(mean, invstd, gamma, gamma_off, has_gamma, beta, beta_off,
                                       has_beta, c);
  const float g = relu_gradient(LOAD(dy, dy_off + i), xv, affine.x, affine.y, relu);
  STORE(dx, dx_off + i, k_scale * (g - k0 - xhat * k1));
}
