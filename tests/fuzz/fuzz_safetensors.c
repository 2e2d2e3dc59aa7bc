/* fuzz_safetensors: a safetensors file's header (src/interop/safetensors.c):
 * 8-byte length, JSON header (dtype, shape, data_offsets per tensor,
 * __metadata__), data region. Input: the file. When fm_st_open accepts it,
 * every tensor must be inside the data region with end - begin = numel x
 * dtype size; each is found by name, read raw, and read as fp32 when its
 * dtype is a float (other dtypes: an error with a message). */
#include "fmhpc/interop.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[512];
  fz_write(path, sizeof path, "model.safetensors", data, size);
  FmStFile f;
  FzErr e;
  int rc = fm_st_open(&f, path, fz_err_open(&e));
  fz_said(&e, rc, "fm_st_open");
  if (rc) {
    fm_st_close(&f);
    return 0;
  }
  for (int i = 0; i < f.n; i++) {
    const FmStTensor *t = &f.t[i];
    if (t->begin < 0 || t->end < t->begin || f.data_start + t->end > (int64_t)size || t->ndim < 0 ||
        t->ndim > FM_ST_MAX_DIMS || t->numel < 0 || (t->end - t->begin) != t->numel * (int64_t)fm_st_dtype_size(t->dtype)) {
      fprintf(stderr, "fuzz_safetensors: tensor '%s' accepted with bytes [%lld, %lld), numel %lld, data %lld\n",
              t->name, (long long)t->begin, (long long)t->end, (long long)t->numel, (long long)size);
      abort();
    }
    if (fm_st_find(&f, t->name) == NULL) abort();
    void *raw = malloc((size_t)(t->end - t->begin) + 1);
    rc = fm_st_read_raw(&f, t, raw, fz_err_open(&e));
    fz_said(&e, rc, "fm_st_read_raw");
    free(raw);
    float *w = malloc((size_t)t->numel * sizeof *w + 1);
    rc = fm_st_read_f32(&f, t, w, fz_err_open(&e));
    fz_said(&e, rc, "fm_st_read_f32");
    free(w);
  }
  (void)fm_st_meta(&f, "format");
  fm_st_close(&f);
  return 0;
}
