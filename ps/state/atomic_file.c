/* Atomic file replacement: temporary file, fsync, rename, directory fsync (atomic_file.h). */
#include "ps/state/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The directory part of path ("." when it has none), for the directory fsync. */
static void dir_of(const char *path, char *out, size_t outlen) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(out, outlen, ".");
  } else if (slash == path) {
    snprintf(out, outlen, "/");
  } else {
    size_t n = (size_t)(slash - path);
    if (n >= outlen) n = outlen - 1;
    memcpy(out, path, n);
    out[n] = '\0';
  }
}

int pst_fsync_dir(const char *dir) {
  int fd;
  do {
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return -errno;
  int rc = 0;
  /* Some file systems refuse fsync on directories (EINVAL); there is nothing more to do
   * there, and the rename is as durable as that file system makes it. */
  if (fsync(fd) != 0 && errno != EINVAL) rc = -errno;
  close(fd);
  return rc;
}

int pst_mkdirs(const char *dir, int mode) {
  char buf[PATH_MAX];
  size_t len = strlen(dir);
  if (len == 0 || len >= sizeof buf) return -ENAMETOOLONG;
  memcpy(buf, dir, len + 1);
  while (len > 1 && buf[len - 1] == '/') buf[--len] = '\0';
  struct stat st;
  if (stat(buf, &st) == 0) return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, (mode_t)mode) != 0 && errno != EEXIST) return -errno;
    *p = '/';
  }
  if (mkdir(buf, (mode_t)mode) != 0) {
    if (errno != EEXIST) return -errno;
    return 0;
  }
  char parent[PATH_MAX];
  dir_of(buf, parent, sizeof parent);
  return pst_fsync_dir(parent);
}

int pst_afile_is_temp(const char *entry, const char *prefix, const char *suffix) {
  size_t pl = strlen(prefix), sl = strlen(suffix);
  if (strncmp(entry, prefix, pl) != 0) return 0;
  const char *tmp = strstr(entry + pl, ".tmp.");
  if (!tmp) return 0;
  const char *digits = tmp + 5;
  if (!*digits) return 0;
  for (const char *d = digits; *d; d++)
    if (*d < '0' || *d > '9') return 0;
  return (size_t)(tmp - entry) >= pl + sl && strncmp(tmp - sl, suffix, sl) == 0;
}

int pst_afile_open(pst_afile *f, const char *path, int mode, char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  f->fault_at = -1;
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  size_t dlen = (size_t)(base - path);
  if (!*base || strlen(path) >= sizeof f->path) {
    snprintf(err, errlen, "%.200s: not a usable file name", path);
    return -EINVAL;
  }
  int n = snprintf(f->tmp, sizeof f->tmp, "%.*s.%s.tmp.%ld", (int)dlen, path, base,
                   (long)getpid());
  if (n < 0 || (size_t)n >= sizeof f->tmp) {
    f->tmp[0] = '\0';
    snprintf(err, errlen, "%.200s: path too long", path);
    return -ENAMETOOLONG;
  }
  snprintf(f->path, sizeof f->path, "%s", path);
  for (int attempt = 0; attempt < 2; attempt++) {
    do {
      f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
    } while (f->fd < 0 && errno == EINTR);
    if (f->fd >= 0) return 0;
    /* Only a crashed writer with our pid leaves this exact name behind. */
    if (errno != EEXIST || attempt == 1 || unlink(f->tmp) != 0) break;
  }
  int e = errno;
  snprintf(err, errlen, "cannot create %.200s: %s", f->tmp, strerror(e));
  f->tmp[0] = '\0';
  return -e;
}

int pst_afile_write(pst_afile *f, const void *p, size_t n, char *err, size_t errlen) {
  const char *c = p;
  for (;;) {
    /* The fault hook is checked before every piece, so that B = 0 dies with an empty
     * file and any B dies with exactly B bytes written. */
    if (f->fault_at >= 0 && f->written == (uint64_t)f->fault_at) abort();
    if (n == 0) return 0;
    size_t piece = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
    if (f->fault_at >= 0 && (uint64_t)f->fault_at > f->written &&
        (uint64_t)f->fault_at - f->written < piece)
      piece = (size_t)((uint64_t)f->fault_at - f->written);
    ssize_t w = write(f->fd, c, piece);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      snprintf(err, errlen, "cannot write %.200s: %s", f->tmp, strerror(e));
      return -e;
    }
    if (w == 0) {
      snprintf(err, errlen, "cannot write %.200s: no progress", f->tmp);
      return -EIO;
    }
    c += w;
    n -= (size_t)w;
    f->written += (uint64_t)w;
  }
}

void pst_afile_discard(pst_afile *f) {
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
  if (f->tmp[0]) unlink(f->tmp);
  f->tmp[0] = '\0';
}

int pst_afile_commit(pst_afile *f, char *err, size_t errlen) {
  if (f->fault_at >= 0 && f->written == (uint64_t)f->fault_at) abort();
  if (fsync(f->fd) != 0) {
    int e = errno;
    snprintf(err, errlen, "cannot fsync %.200s: %s", f->tmp, strerror(e));
    pst_afile_discard(f);
    return -e;
  }
  /* close(2) may report a deferred write error (NFS); the fd is gone either way. */
  int rc = close(f->fd);
  f->fd = -1;
  if (rc != 0 && errno != EINTR) {
    int e = errno;
    snprintf(err, errlen, "cannot close %.200s: %s", f->tmp, strerror(e));
    pst_afile_discard(f);
    return -e;
  }
  if (f->fault_at >= 0) abort(); /* fault_at beyond the file: written, not renamed */
  if (rename(f->tmp, f->path) != 0) {
    int e = errno;
    snprintf(err, errlen, "cannot rename %.200s to %.200s: %s", f->tmp, f->path, strerror(e));
    pst_afile_discard(f);
    return -e;
  }
  f->tmp[0] = '\0';
  if (f->fault_renamed) abort();
  char dir[PATH_MAX];
  dir_of(f->path, dir, sizeof dir);
  rc = pst_fsync_dir(dir);
  if (rc < 0) {
    snprintf(err, errlen, "cannot fsync directory %.200s: %s", dir, strerror(-rc));
    return rc;
  }
  return 0;
}

/* ---- outputs checked before any work (pst_check_output_file, pst_check_output_dir) ---- */

/* Whether a new file can be made in dir, by making one and removing it: access(2) would say
 * yes to root on a read-only file system, or in /proc. */
static int probe_dir(const char *dir) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/.pstrain-probe-XXXXXX", dir) >= (int)sizeof path)
    return -ENAMETOOLONG;
  int fd = mkstemp(path);
  if (fd < 0) return -errno;
  close(fd);
  unlink(path);
  return 0;
}

int pst_check_output_file(const char *flag, const char *path, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      snprintf(err, errlen, "%s %.300s: is a directory, not a file", flag, path);
      return -EISDIR;
    }
    /* An existing file is opened for writing, not truncated: the process that writes it
     * later decides that. */
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      snprintf(err, errlen, "%s %.300s: cannot write it: %s", flag, path, strerror(e));
      return -e;
    }
    close(fd);
    return 0;
  }
  char dir[PATH_MAX];
  dir_of(path, dir, sizeof dir);
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s %.300s: the directory %.300s does not exist", flag, path, dir);
    return -ENOENT;
  }
  int rc = probe_dir(dir);
  if (rc < 0) snprintf(err, errlen, "%s %.300s: cannot write in %.300s: %s", flag, path, dir, strerror(-rc));
  return rc;
}

int pst_check_output_dir(const char *flag, const char *path, int parents, char *err,
                        size_t errlen) {
  struct stat st;
  if (stat(path, &st) != 0) {
    int rc;
    if (parents) {
      rc = pst_mkdirs(path, 0755);
    } else {
      char dir[PATH_MAX];
      dir_of(path, dir, sizeof dir);
      if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s %.300s: the directory %.300s does not exist", flag, path, dir);
        return -ENOENT;
      }
      rc = mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -errno;
    }
    if (rc < 0) {
      snprintf(err, errlen, "%s %.300s: cannot create it: %s", flag, path, strerror(-rc));
      return rc;
    }
  } else if (!S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s %.300s: is not a directory", flag, path);
    return -ENOTDIR;
  }
  int rc = probe_dir(path);
  if (rc < 0) snprintf(err, errlen, "%s %.300s: cannot write in it: %s", flag, path, strerror(-rc));
  return rc;
}
