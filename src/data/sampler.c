/* sampler.c: the stateless sampler of DESIGN section 7. A keyed Feistel
 * permutation per epoch (cycle walking down to N), slots k = step*B + j (from
 * the stored sample count after a resume with another B), and
 * the micro-batch ownership rule of section 5. No state but the step, so a
 * resumed or re-sharded run sees the same samples in the same slots. */
#include "fmhpc/data.h"

#include "fmhpc/rng.h"

enum { FEISTEL_ROUNDS = 6 };

/* One balanced Feistel pass over 2h bits: L, R of h bits each; round i maps
 * (L, R) -> (R, L ^ F_i(R)), F_i from Philox keyed by (seed, FM_RNG_DATA,
 * epoch, i:R). A bijection of [0, 2^(2h)) for any round function. */
static uint64_t feistel(uint64_t seed, uint64_t epoch, int h, uint64_t x) {
  uint64_t mask = h == 32 ? 0xffffffffu : ((uint64_t)1 << h) - 1;
  uint64_t L = x >> h, R = x & mask;
  for (uint64_t i = 0; i < FEISTEL_ROUNDS; i++) {
    FmRng4 b = fm_rng_block(seed, FM_RNG_DATA, (uint32_t)epoch, i << 32 | R); /* epochs wrap at 2^32 */
    uint64_t f = ((uint64_t)b.v[1] << 32 | b.v[0]) & mask;
    uint64_t nl = R;
    R = L ^ f;
    L = nl;
  }
  return L << h | R;
}

int64_t fm_feistel_perm(uint64_t seed, uint64_t epoch, int64_t n, int64_t i) {
  if (n <= 1) return 0;
  int h = 1;
  while (h < 32 && ((uint64_t)1 << (2 * h)) < (uint64_t)n) h++;
  /* The domain 4^h is < 4n, so the walk takes under 4 passes on average; it
   * ends because the permutation's cycle through i returns to [0, n). */
  uint64_t x = (uint64_t)i;
  do x = feistel(seed, epoch, h, x);
  while (x >= (uint64_t)n);
  return (int64_t)x;
}

int fm_sampler_init(FmSampler *s, int64_t n_samples, int64_t global_batch, int64_t micro_batch, int dp_size,
                    int dp_rank, uint64_t seed, FILE *err) {
  if (n_samples < 1) {
    if (err) fprintf(err, "sampler: the training store holds no samples\nhint: check &data train and the prep report\n");
    return FM_EINVAL;
  }
  if (global_batch < 1 || micro_batch < 1 || global_batch % micro_batch) {
    if (err)
      fprintf(err, "sampler: global_batch %lld is not a multiple of micro_batch %lld\n", (long long)global_batch,
              (long long)micro_batch);
    return FM_EINVAL;
  }
  int64_t M = global_batch / micro_batch;
  if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size || M % dp_size) {
    if (err)
      fprintf(err, "sampler: %lld micro-batches per step cannot be split over %d data-parallel ranks\n"
                   "hint: use a dp size that divides global_batch / micro_batch\n",
              (long long)M, dp_size);
    return FM_EINVAL;
  }
  *s = (FmSampler){n_samples, global_batch, micro_batch, M, dp_size, dp_rank, seed, 0, 0};
  return 0;
}

void fm_sampler_resume(FmSampler *s, int64_t step, int64_t samples) {
  s->base_step = step;
  s->base_samples = samples;
}

int64_t fm_sampler_samples_at(const FmSampler *s, int64_t step) {
  return s->base_samples + (step - s->base_step) * s->global_batch;
}

int64_t fm_sampler_index(const FmSampler *s, int64_t step, int64_t j) {
  int64_t k = fm_sampler_samples_at(s, step) + j;
  return fm_feistel_perm(s->seed, (uint64_t)(k / s->n_samples), s->n_samples, k % s->n_samples);
}

void fm_sampler_my_micro(const FmSampler *s, int64_t *first, int64_t *count) {
  *first = s->dp_rank * s->n_micro / s->dp_size;
  *count = (s->dp_rank + 1) * s->n_micro / s->dp_size - *first;
}

void fm_sampler_micro_ids(const FmSampler *s, int64_t step, int64_t m, int64_t *ids) {
  for (int64_t t = 0; t < s->micro_batch; t++) ids[t] = fm_sampler_index(s, step, m * s->micro_batch + t);
}
