/* What gpu-check's checks are made of: a program run to its end or its deadline with its
 * output in a log, a small copy of an IDX data set, and reading JSON and logs back. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/clock.h"
#include "launcher/gpucheck/gpu_check_tools.h"

/* Synchronous and with a deadline, so fork/exec and waitpid rather than the event loop of
 * launcher/run/run.c: the checks run one after the other and nothing else happens meanwhile.
 * The child leads a process group of its own, so that a deadline stops everything it
 * started (a `pstrain local` stops its ps and workers on SIGTERM by itself; the group is
 * for a test binary's helpers and for anything that ignores it). */
int pl_gc_run_child(char *const argv[], const char *const *env, const char *log, double timeout_s,
                    int *timed_out) {
  *timed_out = 0;
  int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -errno;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
    execv(argv[0], argv);
    dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(fd);
  setpgid(pid, pid); /* also here, so the group exists whichever runs first */
  double deadline = pst_now() + timeout_s, killed_at = 0;
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return -errno;
    double now = pst_now();
    if (!*timed_out && now > deadline) {
      *timed_out = 1;
      killed_at = now;
      kill(-pid, SIGTERM);
    } else if (*timed_out && now > killed_at + 10.0) {
      kill(-pid, SIGKILL);
    }
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* ---- a small copy of an IDX data set ---- */

/* The first n records of an IDX file (gzip'd or not; gzread reads both) into out, gzip'd:
 * the header with its first dimension set to the records copied, then the records. */
static int idx_head(const char *in, const char *out, long n, char *err, size_t errlen) {
  gzFile f = gzopen(in, "rb");
  if (f == NULL) {
    snprintf(err, errlen, "%s: cannot open", in);
    return -ENOENT;
  }
  unsigned char h[4 + 4 * 8];
  int rc = -EINVAL;
  gzFile o = NULL;
  unsigned char *buf = NULL;
  if (gzread(f, h, 4) != 4 || h[0] != 0 || h[1] != 0 || h[2] != 0x08 || h[3] < 1 || h[3] > 8) {
    snprintf(err, errlen, "%s: not an IDX file of bytes", in);
    goto done;
  }
  int dims = h[3];
  if (gzread(f, h + 4, 4 * dims) != 4 * dims) {
    snprintf(err, errlen, "%s: truncated header", in);
    goto done;
  }
  unsigned long count = ((unsigned long)h[4] << 24) | (h[5] << 16) | (h[6] << 8) | h[7];
  size_t record = 1;
  for (int d = 1; d < dims; d++) {
    const unsigned char *p = h + 4 + 4 * d;
    record *= ((size_t)p[0] << 24) | ((size_t)p[1] << 16) | ((size_t)p[2] << 8) | p[3];
  }
  if (n > (long)count) n = (long)count;
  h[4] = (unsigned char)(n >> 24), h[5] = (unsigned char)(n >> 16);
  h[6] = (unsigned char)(n >> 8), h[7] = (unsigned char)n;
  size_t bytes = record * (size_t)n;
  buf = malloc(bytes ? bytes : 1);
  o = gzopen(out, "wb");
  if (buf == NULL || o == NULL) {
    snprintf(err, errlen, "%s: cannot write", out);
    rc = -EIO;
    goto done;
  }
  if (gzread(f, buf, (unsigned)bytes) != (int)bytes) {
    snprintf(err, errlen, "%s: fewer records than its header says", in);
    goto done;
  }
  if (gzwrite(o, h, 4 + 4 * dims) != 4 + 4 * dims || gzwrite(o, buf, (unsigned)bytes) != (int)bytes) {
    snprintf(err, errlen, "%s: cannot write", out);
    rc = -EIO;
    goto done;
  }
  rc = 0;
done:
  free(buf);
  if (o && gzclose(o) != Z_OK && rc == 0) {
    snprintf(err, errlen, "%s: cannot write", out);
    rc = -EIO;
  }
  gzclose(f);
  return rc;
}

int pl_gc_subset_data(const char *from, const char *to, long train, long test, char *err,
                      size_t errlen) {
  static const char *const files[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                       "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
  if (mkdir(to, 0755) < 0 && errno != EEXIST) {
    snprintf(err, errlen, "%s: %s", to, strerror(errno));
    return -errno;
  }
  for (int i = 0; i < 4; i++) {
    char in[PATH_MAX], out[PATH_MAX];
    snprintf(in, sizeof in, "%s/%s.gz", from, files[i]);
    if (access(in, R_OK) != 0) snprintf(in, sizeof in, "%s/%s", from, files[i]);
    snprintf(out, sizeof out, "%s/%s.gz", to, files[i]);
    int rc = idx_head(in, out, i < 2 ? train : test, err, errlen);
    if (rc != 0) return rc;
  }
  return 0;
}

/* ---- reading back ---- */

double pl_gc_num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

int pl_gc_train_losses(const char *metrics, double *loss, int max) {
  FILE *f = fopen(metrics, "r");
  if (f == NULL) return 0;
  char line[8192];
  int n = 0;
  while (n < max && fgets(line, sizeof line, f)) {
    cJSON *o = cJSON_Parse(line);
    const char *event = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "event"));
    if (event && strcmp(event, "train") == 0) loss[n++] = pl_gc_num(o, "loss");
    cJSON_Delete(o);
  }
  fclose(f);
  return n;
}

void pl_gc_last_line(const char *log, const char *prefix, const char *skip, char *out,
                     size_t outlen) {
  out[0] = '\0';
  FILE *f = fopen(log, "r");
  if (f == NULL) return;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, prefix, strlen(prefix)) != 0) continue;
    if (skip && strstr(line, skip)) continue;
    snprintf(out, outlen, "%s", line);
  }
  fclose(f);
}
