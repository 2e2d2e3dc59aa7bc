/* comm_internal.h: what the FmComm kinds (comm_mpi.c, comm_nccl.c) share
 * beyond runtime.h: the reduction rules they apply alike. Not a public
 * interface. */
#ifndef FMHPC_COMM_INTERNAL_H
#define FMHPC_COMM_INTERNAL_H

#include <stddef.h>

#include "fmhpc/runtime.h"

/* fmhpc reduces only where it chose the rounding (DESIGN section 6): bf16
 * moves but is never reduced, and BOR is bitwise, on integers only. NULL
 * when (t, r) may be reduced, else why not (for the caller's report). */
static inline const char *fm__comm_reduce_refusal(FmDType t, FmRedOp r) {
  if (t == FM_DT_BF16) return "bf16 cannot be reduced; hint: cast to f32, or to int64 fixed point where bits matter";
  if (r != FM_OP_SUM && r != FM_OP_MAX && r != FM_OP_MIN && r != FM_OP_BOR) return "unknown reduction";
  if (r == FM_OP_BOR && (t == FM_DT_F32 || t == FM_DT_F64))
    return "BOR on a float type: bitwise OR is defined on integer types only";
  return NULL;
}

#endif
