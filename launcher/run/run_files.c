/* The files of a local job that the launcher makes or checks before any process starts: the
 * run directory, the outputs the flags name, the lock on a checkpoint directory, and the
 * job's throwaway cluster secret (launcher/run/run.h). */
#include "launcher/run/run_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/partition.h"
#include "ps/state/atomic_file.h"
#include "ps/state/checkpoint.h"

int pl_make_run_dir(const char *dir, char *out, size_t outlen) {
  if (dir && dir[0]) {
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
      fprintf(stderr, "pstrain: cannot create %s: %s\n", dir, strerror(errno));
      return -errno;
    }
    snprintf(out, outlen, "%s", dir);
    return 0;
  }
  snprintf(out, outlen, "/tmp/pstrain-run-XXXXXX");
  if (!mkdtemp(out)) {
    fprintf(stderr, "pstrain: cannot create a run directory in /tmp: %s\n", strerror(errno));
    return -errno;
  }
  return 0;
}

int pl_lock_dir(const char *dir, char *err, size_t errlen) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s", dir, PL_LOCK_NAME) >= (int)sizeof path) {
    snprintf(err, errlen, "%.300s: the path is too long", dir);
    return -ENAMETOOLONG;
  }
  /* Without O_CLOEXEC: every process of the job inherits the descriptor, and with it the
   * lock, which so outlives a launcher killed on its own while its ps still writes here. */
  int fd = open(path, O_RDWR | O_CREAT, 0644);
  if (fd < 0) {
    int e = errno;
    snprintf(err, errlen, "cannot open %.300s: %s", path, strerror(e));
    return -e;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    if (e == EWOULDBLOCK) {
      snprintf(err, errlen, "%.300s is in use by another job (its processes hold %s)", dir,
               PL_LOCK_NAME);
      return -EBUSY;
    }
    snprintf(err, errlen, "cannot lock %.300s: %s", path, strerror(e));
    return -e;
  }
  return fd;
}

int pl_make_secret(const char *dir, char *path, size_t pathlen, char *err, size_t errlen) {
  unsigned char key[32];
  size_t got = 0;
  while (got < sizeof key) {
    ssize_t n = getrandom(key + got, sizeof key - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      snprintf(err, errlen, "no random bytes for the cluster secret: %s", strerror(e));
      return -e;
    }
    got += (size_t)n;
  }
  char hex[2 * sizeof key + 2];
  for (size_t i = 0; i < sizeof key; i++) snprintf(hex + 2 * i, 3, "%02x", key[i]);
  hex[2 * sizeof key] = '\n';
  hex[2 * sizeof key + 1] = '\0';
  if (snprintf(path, pathlen, "%s/%s", dir, PL_SECRET_NAME) >= (int)pathlen) {
    snprintf(err, errlen, "%.300s: the path is too long", dir);
    return -ENAMETOOLONG;
  }
  /* Written beside its name and renamed in, mode 600 from the start: a file or a link that
   * someone left under that name is replaced, never written through. */
  pst_afile f;
  int rc = pst_afile_open(&f, path, 0600, err, errlen);
  if (rc == 0) rc = pst_afile_write(&f, hex, strlen(hex), err, errlen);
  if (rc == 0) rc = pst_afile_commit(&f, err, errlen);
  if (rc < 0) pst_afile_discard(&f);
  explicit_bzero(key, sizeof key);
  explicit_bzero(hex, sizeof hex);
  return rc;
}

/* The versions of the checkpoints in dir, by their names as the ps writes them, into *out
 * (malloc'd, or NULL): their count, 0 for a missing dir, or -errno. */
static int versions(const char *dir, uint64_t **out) {
  *out = NULL;
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : -errno;
  int n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    uint64_t ver;
    if (pst_ckpt_parse_name(de->d_name, &ver) < 0) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      uint64_t *nv = realloc(*out, (size_t)cap * sizeof *nv);
      if (!nv) {
        closedir(d);
        return -ENOMEM;
      }
      *out = nv;
    }
    (*out)[n++] = ver;
  }
  closedir(d);
  return n;
}

static int holds(const uint64_t *v, int n, uint64_t ver) {
  for (int i = 0; i < n; i++)
    if (v[i] == ver) return 1;
  return 0;
}

static uint64_t newest_of(const uint64_t *v, int n) {
  uint64_t m = 0;
  for (int i = 0; i < n; i++)
    if (v[i] > m) m = v[i];
  return m;
}

int pl_align_shard_checkpoints(const char *dir, int k, char *note, size_t notelen) {
  note[0] = '\0';
  if (k < 2) return 0;
  char sd[PST_MAX_SHARDS][PATH_MAX];
  uint64_t *v[PST_MAX_SHARDS] = {0}, newest[PST_MAX_SHARDS], common = 0;
  int n[PST_MAX_SHARDS] = {0}, differ = 0, rc = 0;
  for (int i = 0; i < k && rc >= 0; i++) {
    if (pst_ckpt_shard_dir(dir, i, k, sd[i], sizeof sd[i]) < 0) {
      snprintf(note, notelen, "%.300s: the path is too long", dir);
      rc = -ENAMETOOLONG;
    } else if ((n[i] = versions(sd[i], &v[i])) < 0) {
      rc = n[i];
      snprintf(note, notelen, "cannot read %.300s: %s", sd[i], strerror(-rc));
    } else {
      newest[i] = newest_of(v[i], n[i]);
      differ |= newest[i] != newest[0];
    }
  }
  if (rc == 0 && differ) {
    /* The newest version that every shard holds (periodic checkpoints fall on the same
     * versions in every shard); 0 when there is none. */
    for (int c = 0; c < n[0]; c++) {
      int all = 1;
      for (int i = 1; i < k && all; i++) all = holds(v[i], n[i], v[0][c]);
      if (all && v[0][c] > common) common = v[0][c];
    }
    for (int i = 0; i < k && rc >= 0; i++)
      if (n[i] > 0 && (rc = pst_ckpt_abandon_after(sd[i], common)) < 0)
        snprintf(note, notelen, "cannot set aside the checkpoints of %.300s after version %" PRIu64
                 ": %s", sd[i], common, strerror(-rc));
  }
  for (int i = 0; i < k; i++) free(v[i]);
  if (rc < 0 || !differ) return rc < 0 ? rc : 0;
  size_t used = (size_t)snprintf(note, notelen, "the shards' newest checkpoints are of versions");
  for (int i = 0; i < k && used < notelen; i++)
    used += (size_t)snprintf(note + used, notelen - used, "%s %" PRIu64, i ? "," : "", newest[i]);
  if (used >= notelen) return 1;
  if (common)
    snprintf(note + used, notelen - used, ": every shard resumes from version %" PRIu64 ", the "
             "newest they all have (the newer ones are renamed *.abandoned)", common);
  else
    snprintf(note + used, notelen - used, ": none is common to them all, and the job starts over "
             "(theirs are renamed *.abandoned)");
  return 1;
}
