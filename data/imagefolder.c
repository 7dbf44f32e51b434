/* Image folders read with libpng's simplified API and libjpeg-turbo's libjpeg API.
 *
 * The files are listed first (sorted, so every worker sees the same order), split, and
 * then decoded one at a time straight into the set's buffer, which is allocated once
 * when the count and the size are known. Each file's size is checked before it is read
 * and each image's dimensions before its pixels are allocated. */
#include "data/imagefolder.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE */
#include <jpeglib.h>
#include <jerror.h> /* the warnings' codes */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define MAX_FILES 10000000

typedef struct {
  char *path;
  int label;
} entry;

typedef struct {
  entry *e;
  int n, cap;
} entry_list;

typedef struct {
  char **names;
  int n, cap;
} name_list;

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_image_suffix(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot != NULL && (strcasecmp(dot, ".png") == 0 || strcasecmp(dot, ".jpg") == 0 ||
                         strcasecmp(dot, ".jpeg") == 0);
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void names_free(name_list *l) {
  for (int i = 0; i < l->n; i++) free(l->names[i]);
  free(l->names);
  memset(l, 0, sizeof *l);
}

/* The entries of dir that are folders (want_dirs) or image files, sorted; dot files are
 * skipped. */
static int list_dir(const char *dir, int want_dirs, int cap, name_list *out, char *err,
                    size_t errlen) {
  memset(out, 0, sizeof *out);
  DIR *d = opendir(dir);
  if (d == NULL) {
    pst_image_err(err, errlen, "%s: cannot open: %s", dir, strerror(errno));
    return -errno;
  }
  struct dirent *de;
  char path[PATH_MAX];
  int rc = 0;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.') continue;
    if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
    if (want_dirs ? !is_dir(path) : (!has_image_suffix(de->d_name) || is_dir(path))) continue;
    if (out->n >= cap) {
      pst_image_err(err, errlen, "%s: more than %d %s", dir, cap, want_dirs ? "class folders" : "images");
      rc = -E2BIG;
      break;
    }
    if (out->n == out->cap) {
      int ncap = out->cap ? out->cap * 2 : 64;
      char **nn = realloc(out->names, (size_t)ncap * sizeof *nn);
      if (nn == NULL) {
        rc = -ENOMEM;
        break;
      }
      out->names = nn;
      out->cap = ncap;
    }
    if ((out->names[out->n] = strdup(de->d_name)) == NULL) {
      rc = -ENOMEM;
      break;
    }
    out->n++;
  }
  closedir(d);
  if (rc == -ENOMEM) pst_image_err(err, errlen, "%s: out of memory listing it", dir);
  if (rc < 0) {
    names_free(out);
    return rc;
  }
  if (out->n > 0) qsort(out->names, (size_t)out->n, sizeof *out->names, cmp_names);
  return 0;
}

static int entries_add(entry_list *l, const char *dir, const char *name, int label) {
  if (l->n >= MAX_FILES) return -E2BIG;
  if (l->n == l->cap) {
    int ncap = l->cap ? l->cap * 2 : 256;
    entry *ne = realloc(l->e, (size_t)ncap * sizeof *ne);
    if (ne == NULL) return -ENOMEM;
    l->e = ne;
    l->cap = ncap;
  }
  size_t len = strlen(dir) + strlen(name) + 2;
  char *p = malloc(len);
  if (p == NULL) return -ENOMEM;
  snprintf(p, len, "%s/%s", dir, name);
  l->e[l->n].path = p;
  l->e[l->n].label = label;
  l->n++;
  return 0;
}

static void entries_free(entry_list *l) {
  for (int i = 0; i < l->n; i++) free(l->e[i].path);
  free(l->e);
  memset(l, 0, sizeof *l);
}

/* Adds class folder base/cls's images with label to train, holding out a seeded
 * `fraction` of them for test (test == NULL: all to train). */
static int add_class(const char *base, const char *cls, int label, double fraction, pst_rng *rng,
                     entry_list *train, entry_list *test, char *err, size_t errlen) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/%s", base, cls);
  name_list files;
  int rc = list_dir(dir, 0, MAX_FILES, &files, err, errlen);
  if (rc < 0) return rc;
  int n = files.n, n_test = 0;
  int32_t *order = malloc(((size_t)n + 1) * sizeof *order);
  if (order == NULL) {
    names_free(&files);
    pst_image_err(err, errlen, "%s: out of memory", dir);
    return -ENOMEM;
  }
  for (int i = 0; i < n; i++) order[i] = i;
  if (test != NULL) {
    /* Each class on its own, so that the test set has the classes' proportions. */
    pst_rng_shuffle(rng, order, n);
    n_test = (int)((double)n * fraction + 0.5);
    if (n_test >= n && n > 1) n_test = n - 1;
  }
  for (int i = 0; i < n && rc == 0; i++)
    rc = entries_add(i < n_test ? test : train, dir, files.names[order[i]], label);
  if (rc < 0) pst_image_err(err, errlen, "%s: %s", dir, rc == -E2BIG ? "too many images" : "out of memory");
  free(order);
  names_free(&files);
  return rc;
}

/* ---- decoding ---- */

static int read_whole(const char *path, unsigned char **buf, size_t *len, char *err,
                      size_t errlen) {
  struct stat st;
  FILE *f = fopen(path, "rb");
  if (f == NULL || fstat(fileno(f), &st) != 0) {
    int e = errno;
    pst_image_err(err, errlen, "%s: cannot open: %s", path, strerror(e));
    if (f) fclose(f);
    return -e;
  }
  if (st.st_size <= 0 || (size_t)st.st_size > PST_IMAGE_MAX_FILE_BYTES) {
    pst_image_err(err, errlen, "%s: %s (%lld bytes; the limit is %zu)", path,
                  st.st_size <= 0 ? "empty image file" : "image file too large",
                  (long long)st.st_size, PST_IMAGE_MAX_FILE_BYTES);
    fclose(f);
    return -EINVAL;
  }
  *len = (size_t)st.st_size;
  *buf = malloc(*len);
  if (*buf == NULL || fread(*buf, 1, *len, f) != *len) {
    pst_image_err(err, errlen, "%s: cannot read %zu bytes", path, *len);
    free(*buf);
    *buf = NULL;
    fclose(f);
    return -EIO;
  }
  fclose(f);
  return 0;
}

static int check_dims(const char *path, unsigned w, unsigned h, char *err, size_t errlen) {
  if (w < 1 || h < 1 || w > PST_IMAGE_MAX_SIDE || h > PST_IMAGE_MAX_SIDE ||
      (size_t)w * h > PST_IMAGE_MAX_PIXELS) {
    pst_image_err(err, errlen, "%s: image of %ux%u pixels is outside the limits (sides 1..%d)",
                  path, w, h, PST_IMAGE_MAX_SIDE);
    return -E2BIG;
  }
  return 0;
}

static int decode_png(const char *path, const unsigned char *buf, size_t len,
                      unsigned char **rgb, int *h, int *w, int *gray, char *err, size_t errlen) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&im, buf, len)) {
    pst_image_err(err, errlen, "%s: corrupt PNG: %s", path, im.message);
    return -EINVAL;
  }
  int rc = check_dims(path, im.width, im.height, err, errlen);
  if (rc < 0) {
    png_image_free(&im);
    return rc;
  }
  *gray = (im.format & PNG_FORMAT_FLAG_COLOR) == 0;
  im.format = PNG_FORMAT_RGB; /* libpng converts gray, palettes and 16 bits; alpha over black */
  unsigned char *out = calloc(1, PNG_IMAGE_SIZE(im));
  if (out == NULL) {
    png_image_free(&im);
    pst_image_err(err, errlen, "%s: out of memory", path);
    return -ENOMEM;
  }
  png_color black = {0, 0, 0};
  if (!png_image_finish_read(&im, &black, out, 0, NULL)) {
    pst_image_err(err, errlen, "%s: corrupt PNG: %s", path, im.message);
    free(out);
    return -EINVAL;
  }
  *rgb = out;
  *h = (int)im.height;
  *w = (int)im.width;
  return 0;
}

/* libjpeg reports errors through a callback that must not return: it jumps back to the
 * decoder with the message. Warnings (corrupt or missing data that libjpeg would paper
 * over with gray) are errors here too, but for stray bytes between markers, which many
 * cameras' files have and which cost no pixel. */
typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_fail(j_common_ptr c) {
  jpeg_err *e = (jpeg_err *)c->err;
  (*c->err->format_message)(c, e->msg);
  longjmp(e->jump, 1);
}

static void jpeg_message(j_common_ptr c, int level) {
  /* level < 0: a warning; trace messages (level >= 0) are ignored. */
  if (level < 0 && c->err->msg_code != JWRN_EXTRANEOUS_DATA) jpeg_fail(c);
}

static int decode_jpeg(const char *path, const unsigned char *buf, size_t len,
                       unsigned char **rgb, int *h, int *w, int *gray, char *err,
                       size_t errlen) {
  struct jpeg_decompress_struct d;
  jpeg_err e;
  unsigned char *volatile out = NULL;
  d.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = jpeg_fail;
  e.pub.emit_message = jpeg_message;
  if (setjmp(e.jump)) {
    pst_image_err(err, errlen, "%s: corrupt JPEG: %s", path, e.msg);
    jpeg_destroy_decompress(&d);
    free(out);
    return -EINVAL;
  }
  jpeg_create_decompress(&d);
  jpeg_mem_src(&d, buf, (unsigned long)len);
  jpeg_read_header(&d, TRUE);
  int rc = check_dims(path, d.image_width, d.image_height, err, errlen);
  if (rc < 0) {
    jpeg_destroy_decompress(&d);
    return rc;
  }
  *gray = d.jpeg_color_space == JCS_GRAYSCALE;
  d.out_color_space = JCS_RGB;
  jpeg_start_decompress(&d);
  size_t stride = (size_t)d.output_width * 3;
  out = malloc(stride * d.output_height);
  if (out == NULL) {
    jpeg_destroy_decompress(&d);
    pst_image_err(err, errlen, "%s: out of memory", path);
    return -ENOMEM;
  }
  while (d.output_scanline < d.output_height) {
    JSAMPROW row = out + stride * d.output_scanline;
    jpeg_read_scanlines(&d, &row, 1);
  }
  jpeg_finish_decompress(&d);
  *h = (int)d.output_height;
  *w = (int)d.output_width;
  jpeg_destroy_decompress(&d);
  *rgb = out;
  return 0;
}

int pst_image_decode(const char *path, unsigned char **rgb, int *h, int *w, int *gray,
                     char *err, size_t errlen) {
  unsigned char *buf = NULL;
  size_t len = 0;
  *rgb = NULL;
  int rc = read_whole(path, &buf, &len, err, errlen);
  if (rc < 0) return rc;
  static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (len >= 8 && memcmp(buf, png_sig, 8) == 0) {
    rc = decode_png(path, buf, len, rgb, h, w, gray, err, errlen);
  } else if (len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff) {
    rc = decode_jpeg(path, buf, len, rgb, h, w, gray, err, errlen);
  } else {
    pst_image_err(err, errlen, "%s: neither a PNG nor a JPEG file (by its first bytes)", path);
    rc = -EINVAL;
  }
  free(buf);
  return rc;
}

/* ---- the set ---- */

/* Decodes every entry of l into d (h x w x 3); *all_gray is cleared by a colour image. */
static int decode_all(const entry_list *l, int h, int w, pst_dataset *d, int *all_gray,
                      char *err, size_t errlen) {
  size_t per = (size_t)h * w * 3;
  memset(d, 0, sizeof *d);
  if ((size_t)l->n > PST_IMAGE_MAX_FLOATS / per) {
    pst_image_err(err, errlen, "%d images of %dx%dx3 are more than the %zu floats allowed", l->n,
                  h, w, (size_t)PST_IMAGE_MAX_FLOATS);
    return -E2BIG;
  }
  d->images = malloc(((size_t)l->n * per + 1) * sizeof(float));
  d->labels = malloc(((size_t)l->n + 1) * sizeof(int32_t));
  float *tmp = NULL;
  if (d->images == NULL || d->labels == NULL) {
    pst_data_free(d);
    pst_image_err(err, errlen, "out of memory for %d images of %dx%dx3", l->n, h, w);
    return -ENOMEM;
  }
  for (int i = 0; i < l->n; i++) {
    unsigned char *rgb = NULL;
    int ih = 0, iw = 0, gray = 0;
    int rc = pst_image_decode(l->e[i].path, &rgb, &ih, &iw, &gray, err, errlen);
    float *dst = d->images + (size_t)i * per;
    size_t n_in = (size_t)ih * iw * 3;
    float *f = dst;
    if (rc == 0 && (ih != h || iw != w)) {
      /* Another size: decoded into a scratch buffer, then resized into the set. */
      float *grown = realloc(tmp, n_in * sizeof(float));
      if (grown == NULL) {
        pst_image_err(err, errlen, "%s: out of memory", l->e[i].path);
        rc = -ENOMEM;
      } else {
        f = tmp = grown;
      }
    }
    if (rc < 0) {
      free(rgb);
      free(tmp);
      pst_data_free(d);
      return rc;
    }
    for (size_t k = 0; k < n_in; k++) f[k] = (float)rgb[k] / 255.0f;
    if (f != dst) pst_resize_bilinear(f, ih, iw, 3, dst, h, w);
    free(rgb);
    *all_gray = *all_gray && gray;
    d->labels[i] = l->e[i].label;
  }
  free(tmp);
  d->n = l->n;
  d->rows = h;
  d->cols = w;
  d->channels = 3;
  return 0;
}

/* A set of grayscale images stored as RGB keeps one of its equal channels. */
static void keep_one_channel(pst_dataset *d) {
  size_t pixels = (size_t)d->n * d->rows * d->cols;
  for (size_t i = 0; i < pixels; i++) d->images[i] = d->images[i * 3];
  d->channels = 1;
}

int pst_imagefolder_detect(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  struct dirent *de;
  char path[PATH_MAX];
  int found = 0;
  while (!found && (de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    found = is_dir(path);
  }
  closedir(d);
  return found;
}

int pst_imagefolder_load(const char *dir, const pst_image_opts *o, pst_dataset *train,
                         pst_dataset *test, int *classes, char *desc, size_t desclen,
                         char *err, size_t errlen) {
  char train_dir[PATH_MAX], test_dir[PATH_MAX];
  name_list cls = {0}, test_cls = {0};
  entry_list tr = {0}, te = {0};
  int rc;
  memset(train, 0, sizeof *train);
  memset(test, 0, sizeof *test);
  if (!(o->test_fraction >= 0 && o->test_fraction < 1)) {
    pst_image_err(err, errlen, "--test-fraction: %g is not in [0, 1)", o->test_fraction);
    return -EINVAL;
  }
  snprintf(train_dir, sizeof train_dir, "%s/train", dir);
  snprintf(test_dir, sizeof test_dir, "%s/test", dir);
  int by_folders = is_dir(train_dir) && is_dir(test_dir);
  const char *base = by_folders ? train_dir : dir;
  if ((rc = list_dir(base, 1, PST_IMAGEFOLDER_MAX_CLASSES, &cls, err, errlen)) < 0) goto done;
  if (cls.n == 0) {
    pst_image_err(err, errlen, "%s: no class folders", base);
    rc = -EINVAL;
    goto done;
  }
  pst_rng rng;
  pst_rng_seed(&rng, o->split_seed);
  for (int c = 0; c < cls.n && rc == 0; c++)
    rc = add_class(base, cls.names[c], c, o->test_fraction, &rng, &tr, by_folders ? NULL : &te,
                   err, errlen);
  if (rc == 0 && by_folders) {
    /* test/'s classes must be train/'s, so that the labels mean the same. */
    rc = list_dir(test_dir, 1, PST_IMAGEFOLDER_MAX_CLASSES, &test_cls, err, errlen);
    for (int c = 0; c < test_cls.n && rc == 0; c++) {
      char **hit = bsearch(&test_cls.names[c], cls.names, (size_t)cls.n, sizeof *cls.names,
                           cmp_names);
      if (hit == NULL) {
        pst_image_err(err, errlen, "%s/%s: a class that %s does not have", test_dir,
                      test_cls.names[c], train_dir);
        rc = -EINVAL;
      } else {
        rc = add_class(test_dir, test_cls.names[c], (int)(hit - cls.names), 0, &rng, &te, NULL,
                       err, errlen);
      }
    }
  }
  if (rc < 0) goto done;
  if (tr.n == 0 || te.n == 0) {
    pst_image_err(err, errlen, "%s: no %s images (PNG or JPEG files in the class folders)",
                  tr.n == 0 ? base : by_folders ? test_dir : dir, tr.n == 0 ? "training" : "test");
    rc = -EINVAL;
    goto done;
  }
  int h = o->height, w = o->width, gray = 1;
  if (h <= 0) {
    /* The first training image sets the size. */
    unsigned char *rgb = NULL;
    rc = pst_image_decode(tr.e[0].path, &rgb, &h, &w, &gray, err, errlen);
    free(rgb);
    gray = 1;
    if (rc < 0) goto done;
  }
  if ((rc = decode_all(&tr, h, w, train, &gray, err, errlen)) < 0 ||
      (rc = decode_all(&te, h, w, test, &gray, err, errlen)) < 0) {
    pst_data_free(train);
    goto done;
  }
  if (gray) {
    keep_one_channel(train);
    keep_one_channel(test);
  }
  *classes = cls.n;
  snprintf(desc, desclen, "image folder %s: %d classes (%s%s%s), %d training and %d test images "
           "(%s), %dx%dx%d", dir, cls.n, cls.names[0], cls.n > 1 ? " .. " : "",
           cls.n > 1 ? cls.names[cls.n - 1] : "", tr.n, te.n,
           by_folders ? "train/ and test/" : "a seeded split", h, w, train->channels);
done:
  names_free(&cls);
  names_free(&test_cls);
  entries_free(&tr);
  entries_free(&te);
  return rc;
}
