/* The collectives on Open MPI (collective/collective.h). MPI_Allreduce does the sums with
 * Open MPI's own algorithms (its "tuned" component: recursive doubling, ring, segmented
 * ring, Rabenseifner, chosen by its fixed rules from the ranks and the message size, or
 * forced through the MCA parameters coll_tuned_use_dynamic_rules and
 * coll_tuned_allreduce_algorithm, whose numbers are Open MPI 4.1's: `ompi_info --param coll
 * tuned --level 9`). Errors are returned (MPI_ERRORS_RETURN), not fatal inside the library,
 * so that a failing rank says what failed before it ends. */
#include "collective/collective.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi/mpi.h>

struct pst_coll {
  int rank, size;
  pst_coll_alg alg;
  MPI_Request pending[PST_COLL_MAX_PENDING];
  int n_pending;
  char err[512];
};

/* Open MPI 4.1's numbers for coll_tuned_allreduce_algorithm. */
static const struct {
  const char *name;
  int ompi;
} algs[] = {
    [PST_COLL_ALG_AUTO] = {"auto", 0},
    [PST_COLL_ALG_RING] = {"ring", 4},
    [PST_COLL_ALG_RECURSIVE_DOUBLING] = {"recursive-doubling", 3},
    [PST_COLL_ALG_RABENSEIFNER] = {"rabenseifner", 6},
};
#define N_ALGS ((int)(sizeof algs / sizeof algs[0]))

int pst_coll_alg_parse(const char *name, pst_coll_alg *out) {
  for (int i = 0; i < N_ALGS; i++)
    if (!strcmp(name, algs[i].name)) {
      *out = (pst_coll_alg)i;
      return 0;
    }
  return -EINVAL;
}

const char *pst_coll_alg_name(pst_coll_alg alg) {
  return (unsigned)alg < (unsigned)N_ALGS ? algs[alg].name : "?";
}

/* Records why an MPI call failed; returns -EIO. */
static int failed(pst_coll *c, const char *what, int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
  snprintf(c->err, sizeof c->err, "%s failed on rank %d of %d: %s", what, c->rank, c->size, text);
  return -EIO;
}

int pst_coll_init(pst_coll_alg alg, pst_coll **out, char *err, size_t errlen) {
  *out = NULL;
  pst_coll *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  c->alg = alg;
  /* Open MPI reads its parameters from the environment when it starts: a forced algorithm
   * goes there first (the flag wins over whatever mpirun was given). */
  if (alg != PST_COLL_ALG_AUTO) {
    char num[16];
    snprintf(num, sizeof num, "%d", algs[alg].ompi);
    setenv("OMPI_MCA_coll_tuned_use_dynamic_rules", "1", 1);
    setenv("OMPI_MCA_coll_tuned_allreduce_algorithm", num, 1);
  }
  /* Funneled: only the training loop's thread calls MPI (the backward pass's bucket hook
   * runs on that thread for the CPU backend). */
  int provided = 0;
  int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) {
    snprintf(err, errlen, "MPI_Init_thread failed (code %d): is this process started by mpirun?",
             rc);
    free(c);
    return -EIO;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c->size);
  *out = c;
  return 0;
}

int pst_coll_rank(const pst_coll *c) { return c->rank; }
int pst_coll_size(const pst_coll *c) { return c->size; }
const char *pst_coll_error(const pst_coll *c) { return c->err; }

/* An integer or boolean MCA parameter as the library holds it (MPI_T's control variables),
 * or -1 when it has none of that name. */
static int read_cvar(const char *want) {
  int n = 0, value = -1;
  if (MPI_T_cvar_get_num(&n) != MPI_SUCCESS) return -1;
  for (int i = 0; i < n; i++) {
    char name[256], desc[256];
    int name_len = sizeof name, desc_len = sizeof desc, verbosity, bind, scope, size = 0;
    MPI_Datatype type;
    MPI_T_enum enumtype;
    if (MPI_T_cvar_get_info(i, name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len,
                            &bind, &scope) != MPI_SUCCESS ||
        strcmp(name, want) != 0)
      continue;
    MPI_T_cvar_handle h;
    int count = 0;
    if (MPI_Type_size(type, &size) != MPI_SUCCESS || size < 1 || size > 8 ||
        MPI_T_cvar_handle_alloc(i, NULL, &h, &count) != MPI_SUCCESS)
      return -1;
    /* Open MPI's booleans are one byte, its integers four (both little-endian here). */
    unsigned char raw[8] = {0};
    if (count == 1 && MPI_T_cvar_read(h, raw) == MPI_SUCCESS) {
      int32_t v32;
      memcpy(&v32, raw, sizeof v32);
      value = size == 1 ? raw[0] : (int)v32;
    }
    MPI_T_cvar_handle_free(&h);
    break;
  }
  return value;
}

void pst_coll_describe(const pst_coll *c, size_t bytes, char *buf, size_t len) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int vlen = 0;
  MPI_Get_library_version(version, &vlen);
  version[strcspn(version, ",\n")] = '\0';
  int provided = 0, dynamic = -1, forced = -1;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS) {
    dynamic = read_cvar("coll_tuned_use_dynamic_rules");
    forced = read_cvar("coll_tuned_allreduce_algorithm");
    MPI_T_finalize();
  }
  const char *name = "?";
  for (int i = 1; i < N_ALGS; i++)
    if (algs[i].ompi == forced) name = algs[i].name;
  if (dynamic == 1 && forced > 0)
    snprintf(buf, len, "%s, %d ranks: allreduce algorithm %s, forced (coll_tuned_use_dynamic_rules"
             "=1, coll_tuned_allreduce_algorithm=%d, read back from the library)", version,
             c->size, name, forced);
  else
    snprintf(buf, len, "%s, %d ranks: allreduce algorithm chosen by Open MPI's tuned fixed rules "
             "for %zu bytes (not forced: coll_tuned_use_dynamic_rules=%d; --ar-algorithm ring "
             "forces the ring)", version, c->size, bytes, dynamic);
}

int pst_coll_bcast_f32(pst_coll *c, float *buf, size_t n, int root) {
  for (size_t at = 0; at < n; at += INT_MAX) {
    int k = n - at < INT_MAX ? (int)(n - at) : INT_MAX;
    int rc = MPI_Bcast(buf + at, k, MPI_FLOAT, root, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return failed(c, "MPI_Bcast", rc);
  }
  return 0;
}

int pst_coll_bcast_u64(pst_coll *c, uint64_t *buf, size_t n, int root) {
  int rc = n > INT_MAX ? MPI_ERR_COUNT
                       : MPI_Bcast(buf, (int)n, MPI_UINT64_T, root, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : failed(c, "MPI_Bcast", rc);
}

int pst_coll_allreduce_f32(pst_coll *c, float *buf, size_t n) {
  for (size_t at = 0; at < n; at += INT_MAX) {
    int k = n - at < INT_MAX ? (int)(n - at) : INT_MAX;
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf + at, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return failed(c, "MPI_Allreduce", rc);
  }
  return 0;
}

int pst_coll_allreduce_f64(pst_coll *c, double *buf, size_t n) {
  int rc = n > INT_MAX ? MPI_ERR_COUNT
                       : MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : failed(c, "MPI_Allreduce", rc);
}

int pst_coll_allgather_u64(pst_coll *c, uint64_t mine, uint64_t *all) {
  int rc = MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : failed(c, "MPI_Allgather", rc);
}

int pst_coll_iallreduce_f32(pst_coll *c, float *buf, size_t n) {
  if (c->n_pending == PST_COLL_MAX_PENDING || n > INT_MAX) {
    snprintf(c->err, sizeof c->err, "more than %d sums pending, or one over %d floats",
             PST_COLL_MAX_PENDING, INT_MAX);
    return -EINVAL;
  }
  int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                          &c->pending[c->n_pending]);
  if (rc != MPI_SUCCESS) return failed(c, "MPI_Iallreduce", rc);
  c->n_pending++;
  return 0;
}

void pst_coll_poke(pst_coll *c) {
  int done = 0;
  if (c->n_pending > 0)
    MPI_Testall(c->n_pending, c->pending, &done, MPI_STATUSES_IGNORE);
}

int pst_coll_wait_all(pst_coll *c) {
  int n = c->n_pending;
  c->n_pending = 0;
  int rc = n > 0 ? MPI_Waitall(n, c->pending, MPI_STATUSES_IGNORE) : MPI_SUCCESS;
  return rc == MPI_SUCCESS ? 0 : failed(c, "MPI_Waitall (the bucketed sums)", rc);
}

int pst_coll_barrier(pst_coll *c) {
  int rc = MPI_Barrier(MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : failed(c, "MPI_Barrier", rc);
}

void pst_coll_finalize(pst_coll *c) {
  if (!c) return;
  MPI_Finalize();
  free(c);
}

void pst_coll_abort(pst_coll *c, int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  free(c);
}
