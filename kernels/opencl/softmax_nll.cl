// The classification head and losses over [rows, cols] scores: log-softmax, NLL with label
// smoothing, the fused cross-entropy head, MSE against one-hot labels, and the accuracy count.
// A row's target distribution with label l and smoothing e: t[c] = (1 - e) (c == l) + e / cols.
// Reductions over a whole batch run in one work-group of REDUCE_GROUP, in a fixed order
// (deterministic). A label outside [0, cols) raises DEVICE_ERROR_LABEL in the error flag and its
// row adds nothing to a loss or count (its target is e / cols everywhere).
// Scores and their gradients are act_t (storage.cl), computed in float; losses are float. The
// outputs beside a 16-bit input may be float32 (*_is_float: the log-probabilities and the
// loss-scaled gradient a network keeps in float32) without a conversion pass.

// Element i of p = v, where p holds float instead of act_t when is_float.
void store_either(__global act_t* p, ulong i, int is_float, float v) {
  if (is_float)
    ((__global float*)p)[i] = v;
  else
    STORE(p, i, v);
}

// A row's maximum (*top) and log(sum exp(row - top)): log_softmax(row)[c] = (row[c] - top) -
// log_sum. (row - top) is exact for nearby values; subtracting top + log_sum at once would round
// it away.
float row_log_sum_exp(__global const act_t* row, uint cols, float* top) {
  float best = -INFINITY;
  for (uint c = 0; c < cols; ++c) best = fmax(best, LOAD(row, c));
  float sum = 0.0f;
  for (uint c = 0; c < cols; ++c) sum += exp(LOAD(row, c) - best);
  *top = best;
  return log(sum);
}

// The row's label, or -1 (after raising the error flag) when it is outside [0, cols).
int checked_label(__global const int* labels, ulong labels_off, uint r, uint cols,
                  __global int* flag, ulong flag_off) {
  const int label = labels[labels_off + r];
  if (label >= 0 && (uint)label < cols) return label;
  raise_error(flag, flag_off, DEVICE_ERROR_LABEL, label);
  return -1;
}

// -sum_c t[c] logp[c] of one row (label checked, >= 0).
float row_nll(__global const act_t* logp, int label, uint cols, float smoothing) {
  float loss = -(1.0f - smoothing) * LOAD(logp, label);
  if (smoothing > 0.0f) {
    float sum = 0.0f;
    for (uint c = 0; c < cols; ++c) sum += LOAD(logp, c);
    loss -= smoothing * sum / (float)cols;
  }
  return loss;
}

// loss[0] = (accumulate ? loss[0] : 0) + sum / rows (rows == 0: + 0).
void store_mean_loss(__global float* loss, ulong loss_off, int accumulate, float sum,
                     uint rows) {
  loss[loss_off] = (accumulate ? loss[loss_off] : 0.0f) + (rows ? sum / (float)rows : 0.0f);
}

// y[r, :] = x[r, :] - logsumexp(x[r, :]); one work-item per row (classification heads are
// narrow).
__kernel void log_softmax_forward(__global const act_t* x, ulong x_off, __global act_t* y,
                                  ulong y_off, int y_is_float, uint rows, uint cols) {
  const uint r = get_global_id(0);
  if (r >= rows) return;
  __global const act_t* row = x + x_off + r * cols;
  float top;
  const float log_sum = row_log_sum_exp(row, cols, &top);
  for (uint c = 0; c < cols; ++c)
    store_either(y, y_off + r * cols + c, y_is_float, (LOAD(row, c) - top) - log_sum);
}

// dx = dy - exp(y) * sum(dy[r, :]); dx may be dy (the row's sum is taken before any write).
__kernel void log_softmax_backward(__global const act_t* y, ulong y_off, __global const act_t* dy,
                                   ulong dy_off, __global act_t* dx, ulong dx_off, uint rows,
                                   uint cols) {
  const uint r = get_global_id(0);
  if (r >= rows) return;
  const uint base = r * cols;
  float sum = 0.0f;
  for (uint c = 0; c < cols; ++c) sum += LOAD(dy, dy_off + base + c);
  for (uint c = 0; c < cols; ++c)
    STORE(dx, dx_off + base + c,
          LOAD(dy, dy_off + base + c) - exp(LOAD(y, y_off + base + c)) * sum);
}

// loss[0] = (accumulate ? loss[0] : 0) + mean over rows of -sum_c t[c] logp[r, c].
__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void nll_loss_forward(__global const act_t* logp, ulong logp_off, __global const int* labels,
                      ulong labels_off, uint rows, uint cols, float smoothing,
                      __global float* loss, ulong loss_off, int accumulate, __global int* flag,
                      ulong flag_off) {
  __local float partial[REDUCE_GROUP];
  const uint lid = get_local_id(0);
  float s = 0.0f;
  for (uint r = lid; r < rows; r += REDUCE_GROUP) {
    const int label = checked_label(labels, labels_off, r, cols, flag, flag_off);
    if (label >= 0) s += row_nll(logp + logp_off + r * cols, label, cols, smoothing);
  }
  partial[lid] = s;
  local_sum(partial);
  if (lid == 0) store_mean_loss(loss, loss_off, accumulate, partial[0], rows);
}

// dlogp[r, c] = -scale * t[c].
__kernel void nll_loss_backward(__global const int* labels, ulong labels_off, uint rows, uint cols,
                                float scale, float smoothing, __global act_t* dlogp,
                                ulong dlogp_off, __global int* flag, ulong flag_off) {
  const uint i = get_global_id(0);
  if (i >= rows * cols) return;
  const uint r = i / cols, c = i - r * cols;
  const int label = labels[labels_off + r];
  if (c == 0 && (label < 0 || (uint)label >= cols))
    raise_error(flag, flag_off, DEVICE_ERROR_LABEL, label);
  const float off = -scale * (smoothing / (float)cols);
  STORE(dlogp, dlogp_off + i, label == (int)c ? off - scale * (1.0f - smoothing) : off);
}

// The fused training head, one work-item per row: y = log_softmax(x), dx = grad_scale *
// (exp(y) - t). with_loss (launched as one work-group): also loss[0] (+)= the mean of
// -sum_c t[c] y[r, c], as nll_loss_forward.
__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void log_softmax_nll(__global const act_t* x, ulong x_off, __global const int* labels,
                     ulong labels_off, uint rows, uint cols, float grad_scale, float smoothing,
                     __global act_t* y, ulong y_off, int y_is_float, __global float* loss,
                     ulong loss_off, int accumulate, __global act_t* dx, ulong dx_off,
                     int dx_is_float, int with_loss, __global int* flag, ulong flag_off) {
  __local float partial[REDUCE_GROUP];
  const uint lid = get_local_id(0);
  const float off = smoothing / (float)cols, on = off + (1.0f - smoothing);
  float nll = 0.0f;
  for (uint r = get_global_id(0); r < rows; r += get_global_size(0)) {
    const uint base = r * cols;
    __global const act_t* row = x + x_off + base;
    float top;
    const float log_sum = row_log_sum_exp(row, cols, &top);
    const int label = checked_label(labels, labels_off, r, cols, flag, flag_off);
    float row_sum = 0.0f, label_v = 0.0f;
    for (uint c = 0; c < cols; ++c) {
      const float v = (LOAD(row, c) - top) - log_sum;  // as log_softmax_forward
      store_either(y, y_off + base + c, y_is_float, v);
      store_either(dx, dx_off + base + c, dx_is_float,
                   grad_scale * (exp(v) - (label == (int)c ? on : off)));
      row_sum += v;
      if (label == (int)c) label_v = v;
    }
    if (label >= 0) {
      nll -= (1.0f - smoothing) * label_v;
      if (smoothing > 0.0f) nll -= smoothing * row_sum / (float)cols;
    }
  }
  if (!with_loss) return;
  partial[lid] = nll;
  local_sum(partial);
  if (lid == 0) store_mean_loss(loss, loss_off, accumulate, partial[0], rows);
}

// loss[0] = (accumulate ? loss[0] : 0) + sum (x - onehot)^2 / (rows * cols); dx (has_dx) =
// grad_scale * 2 * (x - onehot) / cols. One work-group.
__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void mse_loss(__global const act_t* x, ulong x_off, __global const int* labels, ulong labels_off,
              uint rows, uint cols, float grad_scale, __global float* loss, ulong loss_off,
              int accumulate, __global act_t* dx, ulong dx_off, int has_dx, int dx_is_float,
              __global int* flag, ulong flag_off) {
  __local float partial[REDUCE_GROUP];
  const uint lid = get_local_id(0);
  const float k = 2.0f * grad_scale / (float)cols;
  float s = 0.0f, carry = 0.0f;
  for (uint i = lid; i < rows * cols; i += REDUCE_GROUP) {
    const uint r = i / cols, c = i - r * cols;
    const int label = labels[labels_off + r];
    if (c == 0 && (label < 0 || (uint)label >= cols))
      raise_error(flag, flag_off, DEVICE_ERROR_LABEL, label);
    const float d = LOAD(x, x_off + i) - (label == (int)c ? 1.0f : 0.0f);
    kahan_add(&s, &carry, d * d);
    if (has_dx) store_either(dx, dx_off + i, dx_is_float, k * d);
  }
  partial[lid] = s;
  local_sum(partial);
  if (lid == 0) store_mean_loss(loss, loss_off, accumulate, partial[0] / (float)cols, rows);
}

// correct[0] += rows whose first maximal score sits at labels[r]. One work-group.
__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void count_correct(__global const act_t* scores, ulong scores_off, __global const int* labels,
                   ulong labels_off, uint rows, uint cols, __global float* correct,
                   ulong correct_off, __global int* flag, ulong flag_off) {
  __local float partial[REDUCE_GROUP];
  const uint lid = get_local_id(0);
  float hits = 0.0f;
  for (uint r = lid; r < rows; r += REDUCE_GROUP) {
    __global const act_t* row = scores + scores_off + r * cols;
    uint best = 0;
    float top = LOAD(row, 0);
    for (uint c = 1; c < cols; ++c) {
      const float v = LOAD(row, c);
      if (v > top) {
        best = c;
        top = v;
      }
    }
    if (checked_label(labels, labels_off, r, cols, flag, flag_off) == (int)best) hits += 1.0f;
  }
  partial[lid] = hits;
  local_sum(partial);
  if (lid == 0) correct[correct_off] += partial[0];
}
