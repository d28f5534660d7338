// Training-loop kernels: batch gather by index, the step counter, and the fused optimizers.
// Step-time values come from step_state ([0] = batch position, [1] = optimizer steps done).

// dst[i, :] = src[table[step_state[0] * rows + i], :] in 32-bit words (row_words per row).
__kernel void gather_rows_u32(__global const uint* src, ulong src_off, uint row_words,
                              __global const int* table, ulong table_off, uint rows,
                              __global const uint* state, ulong state_off, __global uint* dst,
                              ulong dst_off) {
  const uint i = get_global_id(0);
  if (i >= rows * row_words) return;
  const uint r = i / row_words, j = i - r * row_words;
  const int src_row = table[table_off + (ulong)state[state_off] * rows + r];
  dst[dst_off + i] = src[src_off + (ulong)src_row * row_words + j];
}

// The same in bytes, for rows or offsets that are not whole 32-bit words.
__kernel void gather_rows_u8(__global const uchar* src, ulong src_off, uint row_bytes,
                             __global const int* table, ulong table_off, uint rows,
                             __global const uint* state, ulong state_off, __global uchar* dst,
                             ulong dst_off) {
  const uint i = get_global_id(0);
  if (i >= rows * row_bytes) return;
  const uint r = i / row_bytes, j = i - r * row_bytes;
  const int src_row = table[table_off + (ulong)state[state_off] * rows + r];
  dst[dst_off + i] = src[src_off + (ulong)src_row * row_bytes + j];
}

__kernel void advance_step(__global uint* state, ulong state_off) {
  state[state_off] += 1u;
  state[state_off + 1] += 1u;
}

// PyTorch's SGD over a flat buffer: d = g*grad_scale + wd*p; buf = momentum*buf + d;
// d = nesterov ? d + momentum*buf : buf (momentum > 0 only); p -= lr*d.
__kernel void sgd_update(__global float* params, ulong params_off, __global const float* grads,
                         ulong grads_off, __global float* momentum_buf, ulong momentum_off,
                         uint n, float lr, float momentum, float weight_decay, float grad_scale,
                         int nesterov) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const float p = params[params_off + i];
  float d = grads[grads_off + i] * grad_scale + weight_decay * p;
  if (momentum > 0.0f) {
    const float buf = momentum * momentum_buf[momentum_off + i] + d;
    momentum_buf[momentum_off + i] = buf;
    d = nesterov ? d + momentum * buf : buf;
  }
  params[params_off + i] = p - lr * d;
}

// PyTorch's Adam (L2 weight decay), t = step_state[1] + 1 read here, not baked in by the host.
__kernel void adam_update(__global float* params, ulong params_off, __global const float* grads,
                          ulong grads_off, __global float* m_buf, ulong m_off,
                          __global float* v_buf, ulong v_off, uint n, float lr, float beta1,
                          float beta2, float eps, float weight_decay, float grad_scale,
                          __global const uint* state, ulong state_off) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const int t = (int)(state[state_off + 1] + 1u);
  const float correction1 = 1.0f - pown(beta1, t), correction2 = 1.0f - pown(beta2, t);
  const float p = params[params_off + i];
  const float g = grads[grads_off + i] * grad_scale + weight_decay * p;
  const float m = beta1 * m_buf[m_off + i] + (1.0f - beta1) * g;
  const float v = beta2 * v_buf[v_off + i] + (1.0f - beta2) * g * g;
  m_buf[m_off + i] = m;
  v_buf[v_off + i] = v;
  params[params_off + i] = p - lr * (m / correction1) / (sqrt(v / correction2) + eps);
}
