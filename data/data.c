/* IDX files (the MNIST format) read through zlib, plus sharding and seeded shuffles.
 *
 * An IDX file is a big-endian header (magic, then one 32-bit size per dimension) followed by
 * the values as unsigned bytes. zlib's gzread reads gzip and plain files alike. The headers
 * are checked before anything is allocated, and a payload is allocated only when the file
 * is big enough to hold it, so a short file that claims a huge size fails as "truncated"
 * without ever reserving the size it claims. */
#include "data/data.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned bytes, 3 dimensions */
#define IDX_MAGIC_LABELS 0x00000801u /* unsigned bytes, 1 dimension */
#define MAX_SAMPLES 10000000u
#define MAX_SIDE 4096u
#define NUM_CLASSES 10
/* Bytes per gzread call, and zlib's own input buffer. Large blocks keep the per-call
 * overhead negligible: the 47 MB training images load in a fraction of a second. */
#define READ_BLOCK (1u << 20)
#define GZ_BUFFER (256u << 10)
#define HUGE_PAGE ((size_t)2 << 20)

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (err == NULL || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static int idx_open(const char *path, gzFile *out, char *err, size_t errlen) {
  errno = 0;
  gzFile f = gzopen(path, "rb");
  if (f == NULL) {
    /* gzopen leaves errno from open(2); zero means zlib itself ran out of memory. */
    int e = errno ? errno : ENOMEM;
    set_err(err, errlen, "%s: cannot open: %s", path, strerror(e));
    return -e;
  }
  gzbuffer(f, GZ_BUFFER);
  *out = f;
  return 0;
}

/* Describes a failed gzread. gzerror's text starts with "path: ", which the caller's
 * message already has, so it is dropped. */
static void report_read_error(gzFile f, const char *path, int saved_errno, char *err,
                              size_t errlen) {
  int code = Z_OK;
  const char *msg = gzerror(f, &code);
  if (code == Z_ERRNO) {
    msg = strerror(saved_errno);
  } else if (msg != NULL) {
    size_t pl = strlen(path);
    if (strncmp(msg, path, pl) == 0 && msg[pl] == ':' && msg[pl + 1] == ' ') msg += pl + 2;
  }
  set_err(err, errlen, "%s: read error: %s", path, msg && *msg ? msg : "unknown error");
}

/* Reads up to len bytes, stopping early only at the end of the data. */
static int read_upto(gzFile f, const char *path, void *buf, size_t len, size_t *got, char *err,
                     size_t errlen) {
  size_t done = 0;
  while (done < len) {
    size_t want = len - done < READ_BLOCK ? len - done : READ_BLOCK;
    errno = 0;
    int r = gzread(f, (char *)buf + done, (unsigned)want);
    if (r < 0) {
      report_read_error(f, path, errno, err, errlen);
      return -EIO;
    }
    if (r == 0) break;
    done += (size_t)r;
  }
  *got = done;
  return 0;
}

/* Reads and checks the magic and the ndims sizes of an IDX header. The magic is checked on
 * its own first, so that a file of the wrong kind is named as such even when it is shorter
 * than the header expected. */
static int read_header(gzFile f, const char *path, uint32_t magic, int ndims, uint32_t *dims,
                       char *err, size_t errlen) {
  unsigned char h[16];
  size_t want = 4 + 4 * (size_t)ndims, got = 0, got2 = 0;
  int rc = read_upto(f, path, h, 4, &got, err, errlen);
  if (rc < 0) return rc;
  if (got == 4) {
    uint32_t m = be32(h);
    if (m != magic) {
      set_err(err, errlen,
              "%s: bad magic 0x%08x: expected 0x%08x (IDX %s of unsigned bytes, %d dimension%s)",
              path, (unsigned)m, (unsigned)magic, ndims == 3 ? "images" : "labels", ndims,
              ndims == 1 ? "" : "s");
      return -EINVAL;
    }
    rc = read_upto(f, path, h + 4, want - 4, &got2, err, errlen);
    if (rc < 0) return rc;
    got += got2;
  }
  if (got < want) {
    set_err(err, errlen, "%s: truncated header: expected %zu bytes, got %zu", path,
            want, got);
    return -EINVAL;
  }
  for (int i = 0; i < ndims; i++) dims[i] = be32(h + 4 + 4 * i);
  return 0;
}

/* The most payload bytes the rest of an open file can hold, judged from its size on disk:
 * the size itself for a plain file, and the size times deflate's maximum expansion (about
 * 1032 to 1) for a gzip file. Anything that is not a regular file gets no bound. */
static size_t payload_bound(gzFile f, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return SIZE_MAX;
  size_t size = (size_t)st.st_size;
  if (gzdirect(f)) return size;
  if (size > (SIZE_MAX - 4096) / 1100) return SIZE_MAX;
  return size * 1100 + 4096;
}

/* Memory for a payload of `bytes`. Faulting in the pages costs more than inflating the data
 * on these machines, so big buffers ask for transparent huge pages (512 times fewer faults);
 * they are 2 MiB aligned for that. The result is released with free(). */
static void *alloc_payload(size_t bytes) {
  if (bytes < HUGE_PAGE) return malloc(bytes ? bytes : 1);
  size_t rounded = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
  void *p = aligned_alloc(HUGE_PAGE, rounded);
#ifdef MADV_HUGEPAGE
  if (p != NULL) (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}

/* Reads exactly `total` bytes of payload and widens each to a 4-byte element: a pixel
 * scaled to [0, 1] or a label checked to be a class. Anything after the payload is an error,
 * since it means the header and the data disagree. A file too small to hold the payload is
 * only read through, to count its bytes for the message, so a short file that claims a
 * huge size costs no memory. */
static int read_payload(gzFile f, const char *path, size_t total, int labels, void **out,
                        char *err, size_t errlen) {
  const char *what = labels ? "label data" : "pixel data";
  float lut[256];
  /* A table, so every pixel is exactly i / 255.0f (255 maps to exactly 1.0). */
  for (int i = 0; i < 256; i++) lut[i] = (float)i / 255.0f;
  int fits = total <= payload_bound(f, path);
  unsigned char *buf = malloc(READ_BLOCK);
  uint32_t *data = fits ? alloc_payload(total * sizeof(uint32_t)) : NULL;
  int rc = 0;
  if (buf == NULL || (fits && data == NULL)) {
    set_err(err, errlen, "%s: out of memory for %zu bytes of %s", path, total, what);
    rc = -ENOMEM;
    goto fail;
  }
  size_t done = 0;
  while (done < total) {
    size_t want = total - done < READ_BLOCK ? total - done : READ_BLOCK;
    errno = 0;
    int r = gzread(f, buf, (unsigned)want);
    if (r < 0) {
      report_read_error(f, path, errno, err, errlen);
      rc = -EIO;
      goto fail;
    }
    if (r == 0) break;
    if (data != NULL && labels) {
      int32_t *dst = (int32_t *)data + done;
      for (int i = 0; i < r; i++) {
        if (buf[i] >= NUM_CLASSES) {
          set_err(err, errlen, "%s: label %d at index %zu is out of range 0..%d", path, buf[i],
                  done + (size_t)i, NUM_CLASSES - 1);
          rc = -EINVAL;
          goto fail;
        }
        dst[i] = buf[i];
      }
    } else if (data != NULL) {
      float *dst = (float *)data + done;
      for (int i = 0; i < r; i++) dst[i] = lut[buf[i]];
    }
    done += (size_t)r;
  }
  if (done < total) {
    set_err(err, errlen, "%s: truncated: expected %zu bytes of %s, got %zu", path, total, what,
            done);
    rc = -EINVAL;
    goto fail;
  }
  if (data == NULL) {
    /* The bound was wrong (the file grew while being read): report rather than guess. */
    set_err(err, errlen, "%s: changed while being read", path);
    rc = -EIO;
    goto fail;
  }
  size_t extra = 0;
  rc = read_upto(f, path, buf, 1, &extra, err, errlen);
  if (rc < 0) goto fail;
  if (extra > 0) {
    set_err(err, errlen, "%s: unexpected data after the %zu bytes of %s", path, total, what);
    rc = -EINVAL;
    goto fail;
  }
  free(buf);
  *out = data;
  return 0;
fail:
  free(buf);
  free(data);
  return rc;
}

int pst_data_load(const char *images_path, const char *labels_path, pst_dataset *out,
                  char *err, size_t errlen) {
  gzFile fi = NULL, fl = NULL;
  void *images = NULL, *labels = NULL;
  uint32_t idims[3], ldims[1];
  int rc;
  memset(out, 0, sizeof *out);
  if (err != NULL && errlen > 0) err[0] = '\0';

  /* Both headers first: a count mismatch is reported before the big read. */
  if ((rc = idx_open(images_path, &fi, err, errlen)) < 0) goto done;
  if ((rc = read_header(fi, images_path, IDX_MAGIC_IMAGES, 3, idims, err, errlen)) < 0) goto done;
  if (idims[0] < 1 || idims[0] > MAX_SAMPLES || idims[1] < 1 || idims[1] > MAX_SIDE ||
      idims[2] < 1 || idims[2] > MAX_SIDE) {
    set_err(err, errlen,
            "%s: implausible dimensions %u x %u x %u (limits: 1..%u images of 1..%u x 1..%u "
            "pixels)",
            images_path, (unsigned)idims[0], (unsigned)idims[1], (unsigned)idims[2],
            MAX_SAMPLES, MAX_SIDE, MAX_SIDE);
    rc = -EINVAL;
    goto done;
  }
  if ((rc = idx_open(labels_path, &fl, err, errlen)) < 0) goto done;
  if ((rc = read_header(fl, labels_path, IDX_MAGIC_LABELS, 1, ldims, err, errlen)) < 0) goto done;
  if (ldims[0] < 1 || ldims[0] > MAX_SAMPLES) {
    set_err(err, errlen, "%s: implausible label count %u (limit: 1..%u)", labels_path,
            (unsigned)ldims[0], MAX_SAMPLES);
    rc = -EINVAL;
    goto done;
  }
  if (ldims[0] != idims[0]) {
    set_err(err, errlen, "%s: holds %u labels but %s holds %u images", labels_path,
            (unsigned)ldims[0], images_path, (unsigned)idims[0]);
    rc = -EINVAL;
    goto done;
  }

  size_t n = idims[0];
  if ((rc = read_payload(fl, labels_path, n, 1, &labels, err, errlen)) < 0) goto done;
  if ((rc = read_payload(fi, images_path, n * idims[1] * idims[2], 0, &images, err, errlen)) < 0)
    goto done;
  out->n = (int)n;
  out->rows = (int)idims[1];
  out->cols = (int)idims[2];
  out->channels = 1;
  out->images = images;
  out->labels = labels;
  images = labels = NULL;
  rc = 0;
done:
  if (fi != NULL) gzclose(fi);
  if (fl != NULL) gzclose(fl);
  free(images);
  free(labels);
  return rc;
}

/* Picks "<dir>/<split>-<kind>-ubyte.gz", or the plain name when only that one exists. When
 * neither exists the .gz name is kept, so the error names the file that was expected. */
static int pick_path(const char *dir, const char *split, const char *kind, char *path,
                     size_t len, char *err, size_t errlen) {
  int w = snprintf(path, len, "%s/%s-%s-ubyte.gz", dir, split, kind);
  if (w < 0 || (size_t)w >= len) {
    set_err(err, errlen, "%s/%s-%s-ubyte.gz: path too long", dir, split, kind);
    return -ENAMETOOLONG;
  }
  struct stat st;
  if (stat(path, &st) == 0 || errno != ENOENT) return 0;
  path[w - 3] = '\0';
  if (stat(path, &st) == 0) return 0;
  path[w - 3] = '.';
  return 0;
}

int pst_data_load_split(const char *dir, const char *split, pst_dataset *out, char *err,
                        size_t errlen) {
  char images[PATH_MAX], labels[PATH_MAX];
  memset(out, 0, sizeof *out);
  if (dir == NULL || split == NULL || split[0] == '\0') {
    set_err(err, errlen, "%s: no data split named", dir ? dir : "(no directory)");
    return -EINVAL;
  }
  int rc = pick_path(dir, split, "images-idx3", images, sizeof images, err, errlen);
  if (rc < 0) return rc;
  rc = pick_path(dir, split, "labels-idx1", labels, sizeof labels, err, errlen);
  if (rc < 0) return rc;
  return pst_data_load(images, labels, out, err, errlen);
}

void pst_data_free(pst_dataset *d) {
  free(d->images);
  free(d->labels);
  memset(d, 0, sizeof *d);
}


static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void pst_rng_seed(pst_rng *r, uint64_t seed) {
  /* splitmix64 spreads any seed, zero included, over the 256-bit state (never all zero). */
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t pst_rng_next(pst_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

/* A uniform integer in [0, bound), without modulo bias: draws from the top of the 64-bit
 * range that is not a whole multiple of bound are rejected. */
static uint64_t rng_below(pst_rng *r, uint64_t bound) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do x = pst_rng_next(r);
  while (x >= limit);
  return x % bound;
}

void pst_rng_shuffle(pst_rng *r, int32_t *idx, int n) {
  for (int i = n - 1; i > 0; i--) {
    int j = (int)rng_below(r, (uint64_t)i + 1);
    int32_t t = idx[i];
    idx[i] = idx[j];
    idx[j] = t;
  }
}

void pst_epoch_order(uint64_t seed, uint32_t epoch, int32_t *idx, int n) {
  pst_rng r;
  pst_rng_seed(&r, (seed ^ 0xda7a0de5ull) * 0x9e3779b97f4a7c15ull + epoch);
  for (int i = 0; i < n; i++) idx[i] = i;
  pst_rng_shuffle(&r, idx, n);
}

void pst_data_gather(const pst_dataset *d, const int32_t *idx, int batch, float *x, int32_t *y) {
  size_t features = (size_t)d->rows * (size_t)d->cols * (size_t)d->channels;
  for (int b = 0; b < batch; b++) {
    size_t s = (size_t)idx[b];
    if (x != NULL)
      memcpy(x + (size_t)b * features, d->images + s * features, features * sizeof(float));
    if (y != NULL) y[b] = d->labels[s];
  }
}
