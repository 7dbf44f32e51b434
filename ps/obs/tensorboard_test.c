/* TensorBoard event files (ps/obs/tensorboard.h): CRC32C against the published check values,
 * and a file written by pst_tb read back record by record: each record's length and both
 * masked CRCs, the first record's file_version, and each scalar's tag, value and step
 * decoded with protoc-c's own unpacker. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/testing.h"
#include "proto/tensorboard.pb-c.h"
#include "ps/obs/tensorboard.h"

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads one record: its data in *out (malloc'd) and its length; 0 at the end, -1 if bad. */
static long read_record(FILE *f, uint8_t **out) {
  uint8_t head[12], tail[4];
  size_t got = fread(head, 1, sizeof head, f);
  if (got == 0) return 0;
  if (got != sizeof head) return -1;
  uint64_t len = 0;
  for (int i = 7; i >= 0; i--) len = len << 8 | head[i];
  if (le32(head + 8) != pst_tb_mask_crc(pst_crc32c(head, 8)) || len > 1 << 20) return -1;
  uint8_t *data = malloc(len ? len : 1);
  if (!data || fread(data, 1, len, f) != len || fread(tail, 1, 4, f) != 4 ||
      le32(tail) != pst_tb_mask_crc(pst_crc32c(data, len))) {
    free(data);
    return -1;
  }
  *out = data;
  return (long)len;
}

int main(void) {
  /* Check values: RFC 3720's iSCSI vectors and the usual "123456789". */
  CHECK(pst_crc32c("123456789", 9) == 0xE3069283u);
  uint8_t zeros[32] = {0}, ones[32];
  memset(ones, 0xFF, sizeof ones);
  CHECK(pst_crc32c(zeros, 32) == 0x8A9136AAu);
  CHECK(pst_crc32c(ones, 32) == 0x62A8AB43u);

  char dir[] = "/tmp/pstrain-tb-test-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char sub[256], err[400];
  snprintf(sub, sizeof sub, "%s/run", dir);
  pst_tb tb;
  CHECK(pst_tb_open(&tb, sub, err, sizeof err) == 0);
  CHECK(strstr(tb.path, "/run/events.out.tfevents.") != NULL);
  const char *tags[] = {"loss/train", "accuracy/train"};
  double v1[] = {2.5, 0.0}, v2[] = {0.25, 0.75};
  CHECK(pst_tb_scalars(&tb, 0, tags, v1, 2) == 0);
  CHECK(pst_tb_scalars(&tb, 468, tags, v2, 2) == 0);
  char path[1024];
  snprintf(path, sizeof path, "%s", tb.path);
  pst_tb_close(&tb);

  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return 1;
  int n = 0;
  uint8_t *data;
  long len;
  while ((len = read_record(f, &data)) > 0) {
    Pstrain__Tb__Event *ev = pstrain__tb__event__unpack(NULL, (size_t)len, data);
    CHECK(ev != NULL);
    if (ev) {
      CHECK(ev->wall_time > 1.6e9);
      if (n == 0) {
        CHECK(ev->what_case == PSTRAIN__TB__EVENT__WHAT_FILE_VERSION);
        CHECK(ev->what_case == PSTRAIN__TB__EVENT__WHAT_FILE_VERSION &&
              !strcmp(ev->file_version, "brain.Event:2"));
      } else {
        const double *want = n == 1 ? v1 : v2;
        CHECK(ev->step == (n == 1 ? 0 : 468));
        CHECK(ev->what_case == PSTRAIN__TB__EVENT__WHAT_SUMMARY && ev->summary->n_value == 2);
        for (size_t i = 0; ev->what_case == PSTRAIN__TB__EVENT__WHAT_SUMMARY &&
                           i < ev->summary->n_value; i++) {
          const Pstrain__Tb__SummaryValue *v = ev->summary->value[i];
          CHECK(!strcmp(v->tag, tags[i]));
          /* 0.0 too must be present: TensorBoard needs the oneof set. */
          CHECK(v->value_case == PSTRAIN__TB__SUMMARY_VALUE__VALUE_SIMPLE_VALUE);
          CHECK(v->simple_value == (float)want[i]);
        }
      }
      pstrain__tb__event__free_unpacked(ev, NULL);
    }
    free(data);
    n++;
  }
  CHECK(len == 0);
  CHECK(n == 3);
  fclose(f);
  unlink(path);
  rmdir(sub);
  rmdir(dir);
  return t_summary();
}
