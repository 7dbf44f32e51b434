#include "ps/obs/tensorboard.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proto/tensorboard.pb-c.h"

/* The reflected Castagnoli polynomial's table, built on first use. */
static uint32_t g_crc_table[256];
static int g_crc_ready;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    g_crc_table[i] = c;
  }
  g_crc_ready = 1;
}

uint32_t pst_crc32c(const void *data, size_t n) {
  if (!g_crc_ready) crc_init();
  const uint8_t *p = data;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = g_crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t pst_tb_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

static void put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* One TFRecord holding the packed event. */
static int write_event(pst_tb *tb, const Pstrain__Tb__Event *ev) {
  if (!tb->file || tb->failed) return tb->failed ? -EIO : 0;
  size_t n = pstrain__tb__event__get_packed_size(ev);
  uint8_t small[512];
  uint8_t *data = n <= sizeof small ? small : malloc(n);
  if (!data) return -ENOMEM;
  pstrain__tb__event__pack(ev, data);
  uint8_t head[12], tail[4];
  uint64_t len = n;
  for (int i = 0; i < 8; i++) head[i] = (uint8_t)(len >> (8 * i));
  put_le32(head + 8, pst_tb_mask_crc(pst_crc32c(head, 8)));
  put_le32(tail, pst_tb_mask_crc(pst_crc32c(data, n)));
  int ok = fwrite(head, 1, sizeof head, tb->file) == sizeof head &&
           fwrite(data, 1, n, tb->file) == n && fwrite(tail, 1, sizeof tail, tb->file) == 4 &&
           fflush(tb->file) == 0;
  if (data != small) free(data);
  if (!ok) tb->failed = 1;
  return ok ? 0 : -EIO;
}

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int pst_tb_open(pst_tb *tb, const char *dir, char *err, size_t errlen) {
  memset(tb, 0, sizeof *tb);
  if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
    snprintf(err, errlen, "--tensorboard %.300s: cannot create the directory: %s", dir,
             strerror(errno));
    return -errno;
  }
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  /* The pid too: two ps's of one host started in the same second (compare's modes) must
   * not write the same file. TensorBoard reads every events.out.tfevents.* file. */
  snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%ld.%s.%ld", dir,
           (long)time(NULL), host, (long)getpid());
  tb->file = fopen(tb->path, "wb");
  if (!tb->file) {
    snprintf(err, errlen, "--tensorboard: cannot write %.300s: %s", tb->path, strerror(errno));
    return -errno;
  }
  Pstrain__Tb__Event ev = PSTRAIN__TB__EVENT__INIT;
  ev.wall_time = wall_now();
  ev.what_case = PSTRAIN__TB__EVENT__WHAT_FILE_VERSION;
  ev.file_version = "brain.Event:2";
  if (write_event(tb, &ev) < 0) {
    snprintf(err, errlen, "--tensorboard: cannot write %.300s", tb->path);
    pst_tb_close(tb);
    return -EIO;
  }
  return 0;
}

int pst_tb_scalars(pst_tb *tb, int64_t step, const char *const *tags, const double *values,
                   int n) {
  if (!tb->file) return 0;
  enum { MAX = 16 };
  Pstrain__Tb__SummaryValue v[MAX], *vp[MAX];
  if (n > MAX) n = MAX;
  for (int i = 0; i < n; i++) {
    pstrain__tb__summary_value__init(&v[i]);
    v[i].tag = (char *)tags[i];
    v[i].value_case = PSTRAIN__TB__SUMMARY_VALUE__VALUE_SIMPLE_VALUE;
    v[i].simple_value = (float)values[i];
    vp[i] = &v[i];
  }
  Pstrain__Tb__Summary sum = PSTRAIN__TB__SUMMARY__INIT;
  sum.n_value = (size_t)n;
  sum.value = vp;
  Pstrain__Tb__Event ev = PSTRAIN__TB__EVENT__INIT;
  ev.wall_time = wall_now();
  ev.step = step;
  ev.what_case = PSTRAIN__TB__EVENT__WHAT_SUMMARY;
  ev.summary = &sum;
  return write_event(tb, &ev);
}

void pst_tb_close(pst_tb *tb) {
  if (tb->file) fclose(tb->file);
  tb->file = NULL;
}
