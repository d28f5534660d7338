// Reductions: bias gradients (sum over rows), log-softmax, NLL loss, accuracy counting.
// Reductions over a whole batch run in one work-group of 256, in a fixed order (deterministic).

#define REDUCE_GROUP 256

// Tree sum of partial[0..REDUCE_GROUP) into partial[0]; every work-item must call it.
inline void local_sum(__local float* partial) {
  const uint lid = get_local_id(0);
  for (uint width = REDUCE_GROUP / 2; width > 0; width >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < width) partial[lid] += partial[lid + width];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

// db[c] = beta db[c] + sum_r dy[r, c]. Work-groups are 32 columns x 8 row lanes, so that
// neighbouring work-items read neighbouring columns.
__kernel __attribute__((reqd_work_group_size(32, 8, 1)))
void sum_rows(__global const float* dy, ulong dy_off, uint rows, uint cols,
              __global float* db, ulong db_off, float beta) {
  __local float partial[8][32];
  const uint c = get_global_id(0), tx = get_local_id(0), lane = get_local_id(1);
  float s = 0.0f;
  if (c < cols)
    for (uint r = lane; r < rows; r += 8) s += dy[dy_off + (ulong)r * cols + c];
  partial[lane][tx] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane != 0 || c >= cols) return;
  float total = 0.0f;
  for (int l = 0; l < 8; ++l) total += partial[l][tx];
  db[db_off + c] = beta == 0.0f ? total : beta * db[db_off + c] + total;
}

// A row's maximum (*top) and log(sum exp(row - top)): log_softmax(row)[c] = (row[c] - top) -
// log_sum. (row - top) is exact for nearby values; subtracting top + log_sum at once would round
// it away.
float row_log_sum_exp(__global const float* row, uint cols, float* top) {
  float best = -INFINITY;
  for (uint c = 0; c < cols; ++c) best = fmax(best, row[c]);
  float sum = 0.0f;
  for (uint c = 0; c < cols; ++c) sum += exp(row[c] - best);
  *top = best;
  return log(sum);
}

// y[r, :] = x[r, :] - logsumexp(x[r, :]); one work-item per row (classification heads are narrow).
__kernel void log_softmax_forward(__global const float* x, ulong x_off, __global float* y,
                                  ulong y_off, uint rows, uint cols) {
  const uint r = get_global_id(0);
  if (r >= rows) return;
  __global const float* row = x + x_off + (ulong)r * cols;
  float top;
  const float log_sum = row_log_sum_exp(row, cols, &top);
  for (uint c = 0; c < cols; ++c) y[y_off + (ulong)r * cols + c] = (row[c] - top) - log_sum;
}

// dx = dy - exp(y) * sum(dy[r, :]).
__kernel void log_softmax_backward(__global const float* y, ulong y_off, __global const float* dy,
                                   ulong dy_off, __global float* dx, ulong dx_off, uint rows,
                                   uint cols) {
  const uint r = get_global_id(0);
  if (r >= rows) return;
  const ulong base = (ulong)r * cols;
  float sum = 0.0f;
  for (uint c = 0; c < cols; ++c) sum += dy[dy_off + base + c];
  for (uint c = 0; c < cols; ++c)
    dx[dx_off + base + c] = dy[dy_off + base + c] - exp(y[y_off + base + c]) * sum;
}

// loss[0] = (accumulate ? loss[0] : 0) + mean_r -logp[r, labels[r]]. Labels outside [0, cols)
// count as 0 (a device cannot throw). Launched as one work-group.
__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void nll_loss_forward(__global const float* logp, ulong logp_off, __global const int* labels,
                      ulong labels_off, uint rows, uint cols, __global float* loss,
                      ulong loss_off, int accumulate) {
  __local float partial[REDUCE_GROUP];
  const uint lid = get_local_id(0);
  float s = 0.0f;
  for (uint r = lid; r < rows; r += REDUCE_GROUP) {
    const int label = labels[labels_off + r];
    if (label >= 0 && (uint)label < cols) s -= logp[logp_off + (ulong)r * cols + label];
  }
  partial[lid] = s;
  local_sum(partial);
  if (lid == 0) loss[loss_off] = (accumulate ? loss[loss_off] : 0.0f) + partial[0] / (float)rows;
}

// The fused training head, one work-item per row: y = log_softmax(x), dx = grad_scale *
// (exp(y) - onehot(labels)). with_loss (launched as one work-group): also loss[0] (+)= the NLL
// mean, labels outside [0, cols) counting 0 as in nll_loss_forward.
__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void log_softmax_nll(__global const float* x, ulong x_off, __global const int* labels,
                     ulong labels_off, uint rows, uint cols, float grad_scale,
                     __global float* y, ulong y_off, __global float* loss, ulong loss_off,
                     int accumulate, __global float* dx, ulong dx_off, int with_loss) {
  __local float partial[REDUCE_GROUP];
  const uint lid = get_local_id(0);
  float nll = 0.0f;
  for (uint r = get_global_id(0); r < rows; r += get_global_size(0)) {
    const ulong base = (ulong)r * cols;
    __global const float* row = x + x_off + base;
    float top;
    const float log_sum = row_log_sum_exp(row, cols, &top);
    const int label = labels[labels_off + r];
    for (uint c = 0; c < cols; ++c) {
      const float v = (row[c] - top) - log_sum;  // as log_softmax_forward
      y[y_off + base + c] = v;
      dx[dx_off + base + c] = grad_scale * (exp(v) - (label == (int)c ? 1.0f : 0.0f));
      if (label == (int)c) nll -= v;
    }
  }
  if (!with_loss) return;
  partial[lid] = nll;
  local_sum(partial);
  if (lid == 0)
    loss[loss_off] = (accumulate ? loss[loss_off] : 0.0f) + (rows ? partial[0] / (float)rows : 0.0f);
}

// dlogp[r, c] = (c == labels[r]) ? -scale : 0.
__kernel void nll_loss_backward(__global const int* labels, ulong labels_off, uint rows, uint cols,
                                float scale, __global float* dlogp, ulong dlogp_off) {
  const uint i = get_global_id(0);
  if (i >= rows * cols) return;
  const uint r = i / cols, c = i - r * cols;
  dlogp[dlogp_off + i] = labels[labels_off + r] == (int)c ? -scale : 0.0f;
}

// correct[0] += rows whose first maximal score sits at labels[r]. One work-group.
__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void count_correct(__global const float* scores, ulong scores_off, __global const int* labels,
                   ulong labels_off, uint rows, uint cols, __global float* correct,
                   ulong correct_off) {
  __local float partial[REDUCE_GROUP];
  const uint lid = get_local_id(0);
  float hits = 0.0f;
  for (uint r = lid; r < rows; r += REDUCE_GROUP) {
    __global const float* row = scores + scores_off + (ulong)r * cols;
    uint best = 0;
    for (uint c = 1; c < cols; ++c)
      if (row[c] > row[best]) best = c;
    if (labels[labels_off + r] == (int)best) hits += 1.0f;
  }
  partial[lid] = hits;
  local_sum(partial);
  if (lid == 0) correct[correct_off] += partial[0];
}

// The end of a split-K GEMM: C[i, j] = sum over s < slices of partial[s, i, j] (in slice order),
// + beta C (beta == 0 never reads C), + bias per column (1) or per row (2), ReLU if relu.
// partial is [slices, m, n] packed; C has row stride ldc.
__kernel void split_k_sum(__global const float* partial, ulong partial_off, uint slices, uint m,
                          uint n, __global float* c, ulong c_off, uint ldc, float beta,
                          __global const float* bias, ulong bias_off, int bias_kind, int relu) {
  const uint idx = get_global_id(0);
  if (idx >= m * n) return;
  const uint i = idx / n, j = idx - i * n;
  float v = 0.0f;
  for (uint s = 0; s < slices; ++s) v += partial[partial_off + (ulong)s * m * n + idx];
  __global float* out = c + c_off + (ulong)i * ldc + j;
  if (beta != 0.0f) v += beta * *out;
  if (bias_kind == 1) v += bias[bias_off + j];
  else if (bias_kind == 2) v += bias[bias_off + i];
  *out = relu ? fmax(v, 0.0f) : v;
}
