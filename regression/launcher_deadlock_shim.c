/* launcher_deadlock_shim.c: an LD_PRELOAD library for launcher_deadlock.sh
 * (issue 14) that makes one rank die at the one moment that deadlocks Open
 * MPI 4.1's mpirun with PMIx 4.2.2. Loaded into mpirun and, through the
 * environment, into its ranks:
 *  - in rank 1 (OMPI_COMM_WORLD_RANK): SIGKILL right after its first send(),
 *    the PMIx connect request, before the server has answered;
 *  - in mpirun (no rank variable): the server's second 4-byte send() on a
 *    socket (the connect handshake's rank index, after the reply) waits
 *    FMHPC_SHIM_DELAY_US, so the dead client's reset has arrived and that
 *    send fails ("PMIX ERROR: UNREACHABLE ... ptl_base_connection_hdlr.c").
 * What a random kill hits once in about a hundred early kills, every time. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

ssize_t send(int fd, const void *buf, size_t len, int flags) {
  static ssize_t (*real)(int, const void *, size_t, int);
  static int fours[4096], sends;
  if (!real) real = (ssize_t(*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
  const char *rank = getenv("OMPI_COMM_WORLD_RANK"), *us = getenv("FMHPC_SHIM_DELAY_US");
  if (!rank && us && len == 4 && fd >= 0 && fd < 4096 && ++fours[fd] == 2) usleep((useconds_t)atoi(us));
  const ssize_t rc = real(fd, buf, len, flags);
  if (rank && atoi(rank) == 1 && sends++ == 0) kill(getpid(), SIGKILL);
  return rc;
}
