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

#include "collective/nccl.h"

struct pst_coll {
  int rank, size;
  pst_coll_alg alg;
  /* pst_coll_use_nccl: the float sums on NCCL, over the host range [nccl_base,
   * nccl_base + nccl_floats) staged at the same offsets on the GPU. NULL: Open MPI's. */
  pst_nccl *nccl;
  float *nccl_base;
  size_t nccl_floats;
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
  if (c->nccl) {
    char nccl[400];
    pst_nccl_describe(c->nccl, nccl, sizeof nccl);
    snprintf(buf, len, "%s, %d ranks: the gradients' sums by NCCL's own algorithm (ncclAllReduce), "
             "the rest by %s", nccl, c->size, version);
    return;
  }
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

/* Every rank's reason is the first failing rank's: that rank sends it. Returns -EIO. */
static int agree_failure(pst_coll *c, int ok, const char *mine) {
  int first = ok ? INT_MAX : c->rank, worst = INT_MAX;
  if (MPI_Allreduce(&first, &worst, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS)
    worst = c->rank;
  if (worst == INT_MAX) return 0;
  char why[400];
  snprintf(why, sizeof why, "%s", mine);
  MPI_Bcast(why, sizeof why, MPI_CHAR, worst, MPI_COMM_WORLD);
  why[sizeof why - 1] = '\0';
  snprintf(c->err, sizeof c->err, "NCCL on rank %d: %s", worst, why);
  return -EIO;
}

int pst_coll_use_nccl(pst_coll *c, int device, float *base, size_t n_floats) {
  char err[400] = "";
  /* One GPU per rank, which NCCL requires of a communicator: checked before anything is
   * loaded, from every rank's host and device. */
  char host[MPI_MAX_PROCESSOR_NAME];
  int hlen = 0;
  MPI_Get_processor_name(host, &hlen);
  uint64_t mine[2] = {1469598103934665603ull, (uint64_t)(int64_t)device};
  for (int i = 0; i < hlen; i++) mine[0] = (mine[0] ^ (unsigned char)host[i]) * 1099511628211ull;
  uint64_t *all = malloc((size_t)c->size * sizeof mine);
  int rc = all ? MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, MPI_COMM_WORLD)
               : MPI_ERR_NO_MEM;
  if (rc != MPI_SUCCESS) {
    free(all);
    return failed(c, "MPI_Allgather (the ranks' GPUs)", rc);
  }
  for (int a = 0; a < c->size; a++)
    for (int b = a + 1; b < c->size; b++)
      if (all[2 * a] == all[2 * b] && all[2 * a + 1] == all[2 * b + 1]) {
        snprintf(c->err, sizeof c->err, "ranks %d and %d are both on cuda:%d of one host: NCCL "
                 "takes a GPU of its own for each rank (fewer ranks per host, or Open MPI's "
                 "sums: --collective mpi)", a, b, (int)(int64_t)all[2 * a + 1]);
        free(all);
        return -EINVAL;
      }
  free(all);
  /* Loaded, and rank 0's unique id made, on every rank that can; agreed before the id is
   * sent, so that a rank without NCCL fails every rank alike. */
  int ok = pst_nccl_load(err, sizeof err) == 0;
  struct {
    int32_t ok;
    unsigned char id[PST_NCCL_ID_BYTES];
  } boot = {0, {0}};
  if (ok && c->rank == 0) ok = pst_nccl_unique_id(boot.id, err, sizeof err) == 0;
  if (agree_failure(c, ok, err) < 0) return -EIO;
  if ((rc = MPI_Bcast(&boot, sizeof boot, MPI_BYTE, 0, MPI_COMM_WORLD)) != MPI_SUCCESS)
    return failed(c, "MPI_Bcast (NCCL's unique id)", rc);
  /* Every rank's device, stream and buffers, then the communicator, which every rank joins
   * only once all have prepared (ncclCommInitRank waits for every rank). */
  pst_nccl *n = NULL;
  ok = pst_nccl_prepare(&n, device, n_floats, base, n_floats, err, sizeof err) == 0;
  if (agree_failure(c, ok, err) < 0) {
    pst_nccl_close(n, 0);
    return -EIO;
  }
  ok = pst_nccl_join(n, c->size, c->rank, boot.id, err, sizeof err) == 0;
  if (agree_failure(c, ok, err) < 0) {
    pst_nccl_close(n, 1);
    return -EIO;
  }
  c->nccl = n;
  c->nccl_base = base;
  c->nccl_floats = n_floats;
  return 0;
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

/* Where buf sits on the GPU's staging buffer: its own offset when it lies in the range
 * given to pst_coll_use_nccl (a bucket), else 0 (then no other sum may be pending). */
static int nccl_offset(pst_coll *c, const float *buf, size_t n, size_t *off) {
  if (buf >= c->nccl_base && n <= c->nccl_floats && (size_t)(buf - c->nccl_base) <= c->nccl_floats - n) {
    *off = (size_t)(buf - c->nccl_base);
    return 0;
  }
  *off = 0;
  if (c->n_pending == 0 && n <= c->nccl_floats) return 0;
  snprintf(c->err, sizeof c->err, "rank %d: a sum of %zu floats outside the range NCCL stages",
           c->rank, n);
  return -EINVAL;
}

int pst_coll_allreduce_f32(pst_coll *c, float *buf, size_t n) {
  if (c->nccl) {
    size_t off;
    int rc = nccl_offset(c, buf, n, &off);
    if (rc == 0) rc = pst_nccl_start_f32(c->nccl, buf, off, n, c->err, sizeof c->err);
    if (rc == 0) rc = pst_nccl_wait(c->nccl, c->err, sizeof c->err);
    return rc;
  }
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
  if (c->nccl) {
    /* Queued on NCCL's stream behind the ones before; waited for by pst_coll_wait_all. */
    size_t off;
    int rc = nccl_offset(c, buf, n, &off);
    if (rc == 0) rc = pst_nccl_start_f32(c->nccl, buf, off, n, c->err, sizeof c->err);
    if (rc == 0) c->n_pending++;
    return rc;
  }
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
  if (c->nccl) return; /* NCCL's stream moves by itself */
  if (c->n_pending > 0)
    MPI_Testall(c->n_pending, c->pending, &done, MPI_STATUSES_IGNORE);
}

int pst_coll_wait_all(pst_coll *c) {
  int n = c->n_pending;
  c->n_pending = 0;
  if (c->nccl) return pst_nccl_wait(c->nccl, c->err, sizeof c->err);
  int rc = n > 0 ? MPI_Waitall(n, c->pending, MPI_STATUSES_IGNORE) : MPI_SUCCESS;
  return rc == MPI_SUCCESS ? 0 : failed(c, "MPI_Waitall (the bucketed sums)", rc);
}

int pst_coll_barrier(pst_coll *c) {
  int rc = MPI_Barrier(MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : failed(c, "MPI_Barrier", rc);
}

void pst_coll_finalize(pst_coll *c) {
  if (!c) return;
  pst_nccl_close(c->nccl, 0);
  MPI_Finalize();
  free(c);
}

void pst_coll_abort(pst_coll *c, int code) {
  if (c) pst_nccl_close(c->nccl, 1);
  MPI_Abort(MPI_COMM_WORLD, code);
  free(c);
}
