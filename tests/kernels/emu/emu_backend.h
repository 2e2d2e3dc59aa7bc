/* emu_backend.h: the emulated CUDA backend table, for the programs that run
 * fmhpc's CUDA kernels under the host SIMT emulator (fmhpc_emu.c,
 * test_emu_model.c, test_emu_ops.c). Generated from ops.def as backend.c
 * generates the real one: each fm_simt_<op> (the .cu compiled with -DFM_SIMT)
 * in its FmBackend slot (a signature that differs from the CPU op's does not
 * compile under -Werror), NULL where ops.def says nocuda. host_accessible = 0,
 * so callers take their device paths (batch copies, host staging) as on a GPU. */
#ifndef FMHPC_TESTS_EMU_BACKEND_H
#define FMHPC_TESTS_EMU_BACKEND_H

#include "fmhpc/backend.h"

#define FM__SIMT_DECL_cuda(name, ret, params) ret fm_simt_##name params;
#define FM__SIMT_DECL_nocuda(name, ret, params)
#define FM_OP(name, cuda, use, ret, params) FM__SIMT_DECL_##cuda(name, ret, params)
#include "fmhpc/ops.def"
#undef FM_OP

#define FM__SIMT_SLOT_cuda(name)   .name = fm_simt_##name,
#define FM__SIMT_SLOT_nocuda(name) .name = NULL,
static const FmBackend emu = {
    .name = "cuda (emulated)",
    .host_accessible = 0,
#define FM_OP(name, cuda, use, ret, params) FM__SIMT_SLOT_##cuda(name)
#include "fmhpc/ops.def"
#undef FM_OP
};

#endif
