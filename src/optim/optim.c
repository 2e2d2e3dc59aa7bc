/* optim.c: the optimizer registry (optimizers.def). */
#include "fmhpc/optim.h"

#include "fmhpc/core.h"

static const FmOptimKind registry[] = {
#define FM_OPTIM(n, state, desc) {#n, desc, state},
#include "optimizers.def"
#undef FM_OPTIM
};

int fm_optim_count(void) { return (int)(sizeof registry / sizeof registry[0]); }
const FmOptimKind *fm_optim_at(int i) { return &registry[i]; }

const FmOptimKind *fm_optim_find(const char *name) {
  for (int i = 0; i < fm_optim_count(); i++)
    if (fm_strcasecmp(registry[i].name, name) == 0) return &registry[i];
  return NULL;
}
