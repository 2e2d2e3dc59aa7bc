/* comm_choose.c: which collectives a run uses (&parallel comm), decided in
 * one place from the deck's choice, the backend the step runs on and whether
 * this build has NCCL; and the device (NCCL) communicators of the mesh
 * (fm_mesh_nccl). Pure logic apart from fm_mesh_nccl, so the decision is
 * tested without a GPU (tests/mpi/test_comm_choose.c). */
#include <stdio.h>

#include "fmhpc/runtime.h"

int fm__comm_choose(int choice, int cuda_backend, int have_nccl, int *use_nccl, char *why, size_t n,
                    const char **hint) {
  const char *h = NULL;
  int rc = FM_OK, nccl = 0;
  const size_t sz = why ? n : 0;
  switch (choice) {
    case FM_COMM_CHOICE_AUTO:
      nccl = cuda_backend && have_nccl;
      if (nccl)
        snprintf(why, sz, "auto: NCCL, the step's buffers are CUDA device memory");
      else if (cuda_backend)
        snprintf(why, sz, "auto: MPI, this build has no NCCL");
      else
        snprintf(why, sz, "auto: MPI, the CPU backend's buffers are host memory");
      break;
    case FM_COMM_CHOICE_MPI:
      snprintf(why, sz, "asked for");
      break;
    case FM_COMM_CHOICE_NCCL:
      if (!cuda_backend) {
        snprintf(why, sz,
                 "NCCL collectives need the CUDA backend; training runs on the CPU backend here, whose "
                 "buffers MPI reduces");
        h = have_nccl ? "comm = 'auto' or 'mpi'; or &train backend = 'cuda' on a GPU node"
                      : "comm = 'auto' or 'mpi' (this build has neither CUDA nor NCCL: FMHPC_CUDA=ON, see INSTALL)";
        rc = FM_EUNSUPPORTED;
      } else if (!have_nccl) {
        snprintf(why, sz, "NCCL collectives need a build with NCCL; this fmhpc was built without it");
        h = "comm = 'auto' or 'mpi', or rebuild with NCCL (FMHPC_CUDA=ON finds it, see INSTALL)";
        rc = FM_EUNSUPPORTED;
      } else {
        nccl = 1;
        snprintf(why, sz, "asked for");
      }
      break;
    default:
      snprintf(why, sz, "unknown &parallel comm choice %d", choice);
      h = "comm = 'auto', 'mpi' or 'nccl'";
      rc = FM_EINVAL;
  }
  if (use_nccl) *use_nccl = rc == FM_OK ? nccl : 0;
  if (hint) *hint = h;
  return rc;
}

int fm_comm_choose(int choice, int cuda_backend, int *use_nccl, char *why, size_t n, const char **hint) {
  return fm__comm_choose(choice, cuda_backend, fm_comm_nccl_built(), use_nccl, why, n, hint);
}

/* Every rank of the world returns the same status: the lowest (FM_E* are
 * negative) any rank saw. */
static int world_agree(const FmMesh *m, int st) {
  int all = st;
  FM_CHECK_MPI(MPI_Allreduce(&st, &all, 1, MPI_INT, MPI_MIN, m->world->mpi));
  return all;
}

/* NCCL over the dp and then the tp communicator, on the mesh's device. Every
 * rank of the world calls it. fm_comm_nccl_create agrees on its status within
 * one communicator; the world agrees after each kind, because a tp group
 * spans dp groups: no rank may start the tp bootstrap while another gave up. */
int fm_mesh_nccl(FmMesh *m) {
  if (m->dp_nccl) return FM_OK;
  int st = FM_OK;
  m->dp_nccl = fm_comm_nccl_create(m->dp_comm->mpi, m->device, &st);
  st = world_agree(m, m->dp_nccl ? FM_OK : (st != FM_OK ? st : FM_ENCCL));
  if (st == FM_OK) {
    int st_tp = FM_OK;
    m->tp_nccl = fm_comm_nccl_create(m->tp_comm->mpi, m->device, &st_tp);
    st = world_agree(m, m->tp_nccl ? FM_OK : (st_tp != FM_OK ? st_tp : FM_ENCCL));
  }
  if (st != FM_OK) {
    fm_comm_destroy(m->dp_nccl); /* NULL-safe */
    fm_comm_destroy(m->tp_nccl);
    m->dp_nccl = m->tp_nccl = NULL;
  }
  return st;
}
