/* Hand-fused moons training step: the reference for generated-code quality.
 *
 * MLP 2-16-16-1 with ReLU, hinge loss mean(relu(1 - y * out)), backprop, SGD with
 * momentum (m = MOM * m + g; p -= LR * m), on batch `batch` of a resident data set.
 * One pass over the samples does forward and backward, gradients accumulate in locals.
 * The includer defines BATCH, LR and MOM (the benchmark prepends them), as generated code
 * has its sizes as constants. Built with the C backend's gcc flags (no FMA contraction).
 *
 * params (and mom) pack w1[16][2], b1[16], w2[16][16], b2[16], w3[16], b3[1].
 */
#include <stdint.h>

#define H 16
#define NP (H * 2 + H + H * H + H + H + 1)

int moons_fused(float *restrict params, float *restrict mom, float *restrict xs,
                float *restrict ys, float *restrict loss_out, int64_t batch) {
  float *w1 = params, *b1 = w1 + H * 2, *w2 = b1 + H, *b2 = w2 + H * H, *w3 = b2 + H;
  float *b3 = w3 + H;
  float g[NP] = {0};
  float *gw1 = g, *gb1 = gw1 + H * 2, *gw2 = gb1 + H, *gb2 = gw2 + H * H, *gw3 = gb2 + H;
  float *gb3 = gw3 + H;
  const float *x = xs + batch * BATCH * 2, *y = ys + batch * BATCH;
  float loss = 0.0f;
  for (int s = 0; s < BATCH; s++) {
    float z1[H], h1[H], z2[H], h2[H], gz2[H];
    const float x0 = x[2 * s], x1 = x[2 * s + 1];
    for (int i = 0; i < H; i++) {
      z1[i] = w1[2 * i] * x0 + w1[2 * i + 1] * x1 + b1[i];
      h1[i] = z1[i] > 0.0f ? z1[i] : 0.0f;
    }
    float out = b3[0];
    for (int i = 0; i < H; i++) {
      float acc = 0.0f;
      for (int j = 0; j < H; j++) acc += w2[H * i + j] * h1[j];
      z2[i] = acc + b2[i];
      h2[i] = z2[i] > 0.0f ? z2[i] : 0.0f;
      out += w3[i] * h2[i];
    }
    const float margin = 1.0f - y[s] * out;
    if (margin <= 0.0f) continue;
    loss += margin;
    const float gout = -y[s] / (float)BATCH;
    gb3[0] += gout;
    for (int i = 0; i < H; i++) {
      gw3[i] += gout * h2[i];
      gz2[i] = z2[i] > 0.0f ? gout * w3[i] : 0.0f;
      gb2[i] += gz2[i];
    }
    for (int i = 0; i < H; i++)
      for (int j = 0; j < H; j++) gw2[H * i + j] += gz2[i] * h1[j];
    for (int j = 0; j < H; j++) {
      float gh = 0.0f;
      for (int i = 0; i < H; i++) gh += gz2[i] * w2[H * i + j];
      const float gz1 = z1[j] > 0.0f ? gh : 0.0f;
      gb1[j] += gz1;
      gw1[2 * j] += gz1 * x0;
      gw1[2 * j + 1] += gz1 * x1;
    }
  }
  loss_out[0] = loss / (float)BATCH;
  for (int k = 0; k < NP; k++) {
    mom[k] = MOM * mom[k] + g[k];
    params[k] -= LR * mom[k];
  }
  return 0;
}
