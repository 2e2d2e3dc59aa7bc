/* optim.h: the optimizer registry (src/optim/optimizers.def). Each optimizer
 * declares how many fp32 state values it keeps per parameter, which the plan
 * (fmhpc --check) and ZeRO-1 sharding use; the update rules come with the
 * training work and walk the same registry. */
#ifndef FMHPC_OPTIM_H
#define FMHPC_OPTIM_H

typedef struct FmOptimKind {
  const char *name;
  const char *desc;
  int state_per_param; /* fp32 values per parameter (AdamW: m, v) */
} FmOptimKind;

const FmOptimKind *fm_optim_find(const char *name);
int fm_optim_count(void);
const FmOptimKind *fm_optim_at(int i);

#endif
