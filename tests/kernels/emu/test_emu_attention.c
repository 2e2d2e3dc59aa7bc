/* test_emu_attention.c: the tensor-core (mma.sync m16n8k16 bf16) flash
 * attention kernels of src/tensor/cuda/attention_flash.cu under the SIMT
 * emulator, through the CUDA op with the bf16 compute switch on
 * (fm_simt_attention_set_bf16), on small shapes: T = 9..128 with documents
 * and without, GQA, head sizes 64 and 128, fused (GPT-2 qkv) and separate
 * strides, tails (T not a multiple of 64; at T = 9 three of four warps hold
 * only padding rows), accumulation (+=) into nonzero gradients. Three schedules (forward, reverse, seeded random):
 * equal bits. Every element against a float64 reference from the bf16-rounded inputs and against the CPU op, at the
 * tolerances ../attention_ref.h derives and states. The tests can fail: the same comparison with the document mask left
 * out of the reference, or with the kernel's rows shifted by one, must flag elements (checked below), and each of these
 * plants in the kernel failed every shape when tried by hand: B's two n-tiles swapped in fm__fa_abt (a wrong fragment
 * index), fm__fa_vis ignoring seg (no document mask) or letting key t + 1 through (causal mask off by one), the barrier
 * after a tile's load removed (NaN from shared memory the emulator fills with 0xFF). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../attention_ref.h"
#include "emu/simt.h"
#include "fm_test.h"
#include "fmhpc/tensor.h"

void fm_simt_attention_set_bf16(int on);
void fm_simt_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int64_t ldq,
                           int64_t ldkv, const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS);
void fm_simt_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                           const float *q, const float *k, const float *v, int64_t ldq, int64_t ldkv,
                           const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS);
void fm_simt_attention_flash_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int64_t ldq,
                                 int64_t ldkv, const int32_t *seg, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                 int64_t HS);

enum { NSCHED = 3 };
static const uint64_t seed = 20261201;

static uint64_t rng = 0x243F6A8885A308D3ull;
static double uniform(double lo, double hi) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * ((double)(rng >> 11) * 0x1p-53);
}

static const ArShape shapes[] = {
    /* B, T, NH, NKV, HS, docs, fused */
    {1, 128, 4, 2, 64, 1, 1},  /* documents (ids not ordered), GQA 2:1, GPT-2's fused qkv */
    {2, 72, 2, 1, 128, 1, 0},  /* a tail tile, separate q/k/v */
    {1, 64, 3, 3, 64, 0, 0},   /* one document, no GQA */
    {1, 100, 2, 1, 128, 0, 1}, /* one document, HS 128, a tail tile */
    {3, 9, 4, 1, 64, 1, 0},    /* one partial tile: three warps of padding rows */
    {1, 256, 2, 1, 64, 2, 1},  /* documents numbered in order: whole tiles skipped */
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

FM_TEST(flash_fwd_bwd) {
  int64_t compared = 0;
  fm_simt_reset_stats();
  for (int si = 0; si < NSHAPES; si++) {
    const ArShape sh = shapes[si];
    AttnCase c = attn_case_new(sh, uniform, 1, 1);
    const ArProb *p = &c.p;
    const int64_t NO = c.NO, NL = c.NL, ng = c.ng, HS = sh.HS;
    fm_simt_attention_set_bf16(1);
    float *first_o = NULL, *first_l = NULL, *first_g = NULL;
    for (int s = 0; s < NSCHED; s++) {
      fm_simt_set_schedule((FmSimtOrder)s, seed);
      float *go = ar_f32(NO), *gl = ar_f32(NL), *gg = ar_f32(ng);
      memcpy(gg, c.base_g, (size_t)ng * sizeof *gg);
      fm_simt_attention_fwd(go, gl, p->q, p->k, p->v, p->ldq, p->ldkv, p->seg, sh.B, sh.T, sh.NH, sh.NKV, HS);
      /* the backward gets the CPU op's out and lse, as the references */
      fm_simt_attention_bwd(gg, gg + c.koff, gg + c.voff, p->dout, c.co, c.cl, p->q, p->k, p->v, p->ldq, p->ldkv,
                            p->seg, sh.B, sh.T, sh.NH, sh.NKV, HS);
      if (s == 0) {
        char when[64];
        snprintf(when, sizeof when, "shape %d under %s", si, fm_simt_schedule_name());
        FM_EXPECT_EQ_INT(attn_case_check(&c, go, gl, gg, when, &compared), 0);
        /* the bound is tight enough to see a mask or a layout error: the
         * reference without documents (where there are some) or the kernel's
         * rows shifted by one must be flagged */
        if (sh.docs) {
          ArProb nodoc = c.p;
          nodoc.seg = NULL;
          double *o2 = ar_f64(NO), *l2 = ar_f64(NL), *m2 = ar_f64(NO), qk2;
          ar_ref_fwd(o2, l2, m2, &qk2, &nodoc, c.rq, c.rk, c.rv, 1);
          const int64_t flagged = ar_outside("(planted) no documents", when, go, o2, NULL, c.tbo, NO, 0, NULL);
          printf("  shape %d: a reference without the document mask flags %lld of %lld outputs\n", si,
                 (long long)flagged, (long long)NO);
          FM_EXPECT(flagged > NO / 10);
          free(o2), free(l2), free(m2);
        }
        const int64_t row = sh.NH * HS;
        const int64_t flagged =
            ar_outside("(planted) rows shifted", when, go + row, c.wo, NULL, c.tbo, NO - row, 0, NULL);
        printf("  shape %d: the kernel's rows shifted by one flag %lld of %lld outputs\n", si, (long long)flagged,
               (long long)(NO - row));
        FM_EXPECT(flagged > (NO - row) / 2);
        /* the switch took the tensor-core kernel: same bits as calling it */
        float *fo = ar_f32(NO), *fl = ar_f32(NL);
        fm_simt_attention_flash_fwd(fo, fl, p->q, p->k, p->v, p->ldq, p->ldkv, p->seg, sh.B, sh.T, sh.NH, sh.NKV, HS);
        FM_EXPECT_EQ_INT(ar_bit_diffs(fo, go, NO) + ar_bit_diffs(fl, gl, NL), 0);
        free(fo), free(fl);
        first_o = go, first_l = gl, first_g = gg;
      } else {
        const int64_t d = ar_bit_diffs(go, first_o, NO) + ar_bit_diffs(gl, first_l, NL) + ar_bit_diffs(gg, first_g, ng);
        if (d)
          FM__FAIL("shape %d under %s: %lld elements differ in bits from the forward schedule", si,
                   fm_simt_schedule_name(), (long long)d);
        free(go), free(gl), free(gg);
      }
    }
    /* with the switch off the fp32 kernels run: not the bf16 bits */
    fm_simt_attention_set_bf16(0);
    float *xo = ar_f32(NO), *xl = ar_f32(NL);
    fm_simt_attention_fwd(xo, xl, p->q, p->k, p->v, p->ldq, p->ldkv, p->seg, sh.B, sh.T, sh.NH, sh.NKV, HS);
    FM_EXPECT(ar_bit_diffs(xo, first_o, NO) > 0);
    free(xo), free(xl);
    printf("  shape %d: B=%lld T=%lld NH=%lld NKV=%lld HS=%lld, %s, %s: bits equal under %d schedules\n", si,
           (long long)sh.B, (long long)sh.T, (long long)sh.NH, (long long)sh.NKV, (long long)HS,
           sh.docs == 2 ? "documents in order"
           : sh.docs    ? "documents"
                        : "one document",
           sh.fused ? "fused qkv" : "separate q/k/v", NSCHED);
    free(first_o), free(first_l), free(first_g);
    attn_case_free(&c);
  }
  FmSimtStats st;
  fm_simt_stats(&st);
  printf(
      "emu: attention (tensor cores): %d shapes x %d schedules (forward, reverse, random(%llu)): %llu launches, "
      "%llu blocks, %llu fiber switches, %lld values compared\n",
      NSHAPES, NSCHED, (unsigned long long)seed, (unsigned long long)st.launches, (unsigned long long)st.blocks,
      (unsigned long long)st.switches, (long long)compared);
  FM_EXPECT(compared > 0);
}
