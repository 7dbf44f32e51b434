/* Directories of checkpoints: naming, writing with retention, and finding the newest valid
 * one (checkpoint.h). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/state/atomic_file.h"
#include "ps/state/checkpoint.h"
#include "ps/state/checkpoint_internal.h"

#define PREFIX "ckpt-"
#define SUFFIX ".safetensors"

int pst_ckpt_parse_name(const char *name, uint64_t *version) {
  size_t pl = strlen(PREFIX), sl = strlen(SUFFIX), len = strlen(name);
  if (len <= pl + sl || strncmp(name, PREFIX, pl) != 0 || strcmp(name + len - sl, SUFFIX) != 0)
    return -EINVAL;
  uint64_t v = 0;
  for (size_t i = pl; i < len - sl; i++) {
    if (name[i] < '0' || name[i] > '9') return -EINVAL;
    if (v > (UINT64_MAX - 9) / 10) return -EINVAL;
    v = v * 10 + (uint64_t)(name[i] - '0');
  }
  *version = v;
  return 0;
}

typedef struct {
  uint64_t version;
  char name[NAME_MAX + 1];
} entry;

static int newest_first(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->version != y->version) return x->version > y->version ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* The checkpoints in dir, newest first, in *out (malloc'd; free it). With remove_temps,
 * stale temporary files of crashed writes are removed on the way. Returns the count or a
 * negative errno (-ENOENT: no such directory). */
static int list_ckpts(const char *dir, int remove_temps, entry **out) {
  *out = NULL;
  DIR *d = opendir(dir);
  if (!d) return -errno;
  int n = 0, cap = 0, rc = 0;
  entry *v = NULL;
  struct dirent *de;
  for (;;) {
    errno = 0;
    if (!(de = readdir(d))) {
      rc = -errno;
      break;
    }
    uint64_t ver;
    if (remove_temps && pst_afile_is_temp(de->d_name, "." PREFIX, SUFFIX)) {
      char p[PATH_MAX];
      if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < (int)sizeof p) unlink(p);
      continue;
    }
    if (pst_ckpt_parse_name(de->d_name, &ver) < 0) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      entry *nv = realloc(v, (size_t)cap * sizeof *v);
      if (!nv) {
        rc = -ENOMEM;
        break;
      }
      v = nv;
    }
    v[n].version = ver;
    snprintf(v[n].name, sizeof v[n].name, "%s", de->d_name);
    n++;
  }
  closedir(d);
  if (rc < 0) {
    free(v);
    return rc;
  }
  if (n) qsort(v, (size_t)n, sizeof *v, newest_first);
  *out = v;
  return n;
}

int pst_ckpt_abandon_after(const char *dir, uint64_t version) {
  entry *v;
  int n = list_ckpts(dir, 0, &v);
  if (n < 0) return n;
  int renamed = 0;
  for (int i = 0; i < n && v[i].version > version; i++) {
    char from[PATH_MAX], to[PATH_MAX];
    if (snprintf(from, sizeof from, "%s/%s", dir, v[i].name) >= (int)sizeof from ||
        snprintf(to, sizeof to, "%s/%s.abandoned", dir, v[i].name) >= (int)sizeof to)
      continue;
    if (rename(from, to) == 0) renamed++;
  }
  free(v);
  return renamed;
}

/* PSTRAIN_CKPT_FAULT_AT (checkpoint.h): 0 and the hook's settings, or -EINVAL. */
static int fault_hook(int64_t *at, int *renamed) {
  *at = -1;
  *renamed = 0;
  const char *s = getenv("PSTRAIN_CKPT_FAULT_AT");
  if (!s) return 0;
  if (!strcmp(s, "renamed")) {
    *renamed = 1;
    return 0;
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (!*s || *end || errno || s[0] == '-' || v > INT64_MAX) return -EINVAL;
  *at = (int64_t)v;
  return 0;
}

int pst_ckpt_path(const char *dir, uint64_t version, char *out, size_t outlen) {
  int n = snprintf(out, outlen, "%s/" PREFIX "%012" PRIu64 SUFFIX, dir, version);
  return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

int pst_ckpt_shard_dir(const char *dir, int index, int count, char *out, size_t outlen) {
  int n = snprintf(out, outlen, "%s/shard-%d-of-%d", dir, index, count);
  return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

int pst_ckpt_write(const char *dir, uint64_t version, const pst_ckpt_tensor *t, int nt,
                   const pst_ckpt_kv *meta, int nmeta, int keep, char *path_out, size_t pathlen,
                   char *err, size_t errlen) {
  int64_t fault_at;
  int fault_renamed;
  if (fault_hook(&fault_at, &fault_renamed) < 0) {
    snprintf(err, errlen, "PSTRAIN_CKPT_FAULT_AT wants a byte count or 'renamed'");
    return -EINVAL;
  }
  char path[PATH_MAX];
  if (pst_ckpt_path(dir, version, path, sizeof path) < 0) {
    snprintf(err, errlen, "checkpoint directory name too long");
    return -ENAMETOOLONG;
  }
  int rc = pst_mkdirs(dir, 0750);
  if (rc < 0) {
    snprintf(err, errlen, "cannot create checkpoint directory %.200s: %s", dir, strerror(-rc));
    return rc;
  }
  /* Stale temporaries go first: a crashed write of a big model may hold the very disk
   * space this one needs. */
  entry *old = NULL;
  rc = list_ckpts(dir, 1, &old);
  free(old);
  if (rc < 0) {
    snprintf(err, errlen, "cannot read checkpoint directory %.200s: %s", dir, strerror(-rc));
    return rc;
  }
  rc = pst_ckpt_write_faulty(path, t, nt, meta, nmeta, fault_at, fault_renamed, err, errlen);
  if (rc < 0) return rc;
  if (path_out) snprintf(path_out, pathlen, "%s", path);
  if (keep <= 0) return 0;
  /* Retention is best effort: the checkpoint is safely written whatever happens here, and
   * an old file left behind is removed by the next write. */
  int n = list_ckpts(dir, 0, &old);
  for (int i = keep; i < n; i++) {
    if (old[i].version == version) continue;
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", dir, old[i].name) < (int)sizeof p) unlink(p);
  }
  free(old);
  return 0;
}

int pst_ckpt_load_latest(const char *dir,
                         int (*accept)(const pst_ckpt *ck, void *arg, char *why, size_t whylen),
                         void (*skipped)(const char *path, const char *reason, void *arg),
                         void *arg, pst_ckpt *ck, char *path_out, size_t pathlen,
                         char *err, size_t errlen) {
  memset(ck, 0, sizeof *ck);
  entry *v;
  int n = list_ckpts(dir, 0, &v);
  if (n == -ENOENT) {
    snprintf(err, errlen, "no checkpoint directory %.200s", dir);
    return -ENOENT;
  }
  if (n < 0) {
    snprintf(err, errlen, "cannot read checkpoint directory %.200s: %s", dir, strerror(-n));
    return n;
  }
  int n_skipped = 0;
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX], why[512];
    if (snprintf(path, sizeof path, "%s/%s", dir, v[i].name) >= (int)sizeof path) continue;
    int rc = pst_ckpt_load(path, ck, why, sizeof why);
    if (rc == 0 && accept && accept(ck, arg, why, sizeof why) != 0) {
      pst_ckpt_free(ck);
      rc = -EINVAL;
    }
    if (rc == 0) {
      if (path_out) snprintf(path_out, pathlen, "%s", path);
      free(v);
      return 0;
    }
    n_skipped++;
    if (skipped) skipped(path, why, arg);
  }
  free(v);
  if (n_skipped)
    snprintf(err, errlen, "no valid checkpoint in %.200s (%d skipped)", dir, n_skipped);
  else
    snprintf(err, errlen, "no checkpoint in %.200s", dir);
  return -ENOENT;
}
