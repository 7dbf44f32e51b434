/* The timeline's recording module in process: the window of steps, events from several
 * threads at once, the file's JSON (read back with cJSON: each span's times, the async pairs,
 * thread names, the offsets' best sample), a full buffer counted as dropped, the cost of an
 * event when off and on, and an unwritable path refused at open. */
#include "common/timeline.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "common/check.h"
#include "common/clock.h"

#define PER_THREAD 1000

static void recorder(void *arg) {
  const char *name = arg;
  pst_tl_thread(name);
  for (int i = 0; i < PER_THREAD; i++) {
    double t = 100.0 + i * 1e-3;
    pst_tl_span("test", name, t, t + 5e-4, PST_TL_STEP(3, i));
  }
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
  if (s) s[n] = '\0';
  fclose(f);
  return s;
}

int main(void) {
  char err[512];
  /* Off: nothing is kept, and an event costs a call and a load (bounds loose: the test
   * machine may be loaded several times over). */
  CHECK(!pst_tl_on());
  double t0 = pst_now();
  for (int i = 0; i < 10000000; i++) pst_tl_span("x", "y", 0, 1, PST_TL_NOARGS);
  double off_ns = (pst_now() - t0) / 1e7 * 1e9;
  CHECKF(off_ns < 200, "%.1f ns an event while off", off_ns);

  CHECK(pst_tl_open("/nonexistent-dir/t.json", "p", 0, 1, err, sizeof err) < 0);
  CHECK(strstr(err, "/nonexistent-dir/t.json") != NULL);

  char dir[] = "/tmp/psttlXXXXXX", path[64];
  if (!mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/t.json", dir);
  CHECK(pst_tl_open(path, "test process", 2, 3, err, sizeof err) == 0);
  /* The window [2, 5): on from step 1 to 5 (a step's slack), keeping steps 2-4 only. */
  pst_tl_step(0);
  CHECK(!pst_tl_on());
  pst_tl_step(1);
  CHECK(pst_tl_on());
  pst_tl_span("test", "before", 1, 2, PST_TL_NOARGS);
  pst_tl_span("test", "before", 1, 2, PST_TL_STEP(5, 0));
  pst_tl_step(6);
  CHECK(!pst_tl_on());
  pst_tl_step(5);
  pst_tl_span("test", "inner", 10.1, 10.2, PST_TL_CHUNK(2, 3, 4096, 1024, 2)); /* its own step */
  pst_tl_step(2);
  CHECK(pst_tl_on());
  CHECK(pst_tl_current_step() == 2);
  pst_tl_thread("main");
  pst_tl_span("test", "outer", 10.0, 10.5, PST_TL_STEP(2, -1));
  pst_tl_async("wire", "chunk", 9, 10.05, 10.45, PST_TL_CHUNK(2, 0, 0, 100, 2));
  pst_tl_offset("ps", 0.25, 1e-3);
  pst_tl_offset("ps", 0.2501, 2e-4); /* the tighter sample wins */
  pst_tl_offset("ps", 0.3, 5e-3);

  /* Four threads at once, each into its own buffer. */
  uv_thread_t th[4];
  static const char *const names[4] = {"t0", "t1", "t2", "t3"};
  for (int i = 0; i < 4; i++) uv_thread_create(&th[i], recorder, (void *)names[i]);
  for (int i = 0; i < 4; i++) uv_thread_join(&th[i]);
  CHECKF(pst_tl_count() == 3 + 4 * PER_THREAD, "%llu events", (unsigned long long)pst_tl_count());

  /* On: an event costs a store into the thread's buffer. */
  t0 = pst_now();
  for (int i = 0; i < 20000; i++) pst_tl_span("cost", "c", 1, 2, PST_TL_NOARGS);
  double on_ns = (pst_now() - t0) / 2e4 * 1e9;
  CHECKF(on_ns < 5000, "%.1f ns an event while on", on_ns);
  /* A full buffer drops the rest and counts them. */
  for (int i = 0; i < PST_TL_THREAD_EVENTS; i++) pst_tl_span("cost", "c", 1, 2, PST_TL_NOARGS);
  uint64_t dropped = pst_tl_dropped();
  CHECKF(dropped == 3 + 20000, "%llu dropped", (unsigned long long)dropped);
  CHECK(pst_tl_write(err, sizeof err) == 0);
  CHECK(!pst_tl_on());
  pst_tl_span("test", "after", 1, 2, PST_TL_NOARGS); /* closed: ignored, no crash */

  char *text = slurp(path);
  cJSON *doc = text ? cJSON_Parse(text) : NULL;
  CHECK(doc != NULL);
  cJSON *evs = cJSON_GetObjectItem(doc, "traceEvents");
  CHECK(cJSON_IsArray(evs));
  int spans = 0, begins = 0, ends = 0, thread_names = 0, seen_inner = 0, seen_before = 0;
  double chunk_b = -1, chunk_e = -1;
  cJSON *e;
  cJSON_ArrayForEach(e, evs) {
    const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
    double ts = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "ts"));
    if (!ph || !name) continue;
    if (strcmp(ph, "M") == 0 && strcmp(name, "thread_name") == 0) thread_names++;
    if (strcmp(ph, "X") == 0) spans++;
    if (strcmp(name, "before") == 0) seen_before = 1;
    if (strcmp(ph, "X") == 0 && strcmp(name, "inner") == 0) {
      seen_inner = 1;
      cJSON *args = cJSON_GetObjectItem(e, "args");
      CHECK(ts == 10.1e6);
      CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(e, "dur")) == 0.1e6);
      CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(args, "offset")) == 4096);
      CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(args, "index")) == 3);
      CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(args, "version")) == 2);
    }
    if (strcmp(ph, "b") == 0) begins++, chunk_b = ts;
    if (strcmp(ph, "e") == 0) ends++, chunk_e = ts;
  }
  CHECKF(spans == 4 * PER_THREAD + PST_TL_THREAD_EVENTS - 1, /* main's buffer: one async */
         "%d spans", spans);
  CHECK(begins == 1 && ends == 1 && chunk_b == 10.05e6 && chunk_e == 10.45e6);
  CHECK(thread_names == 5);
  CHECK(seen_inner && !seen_before);
  cJSON *m = cJSON_GetObjectItem(doc, "metadata");
  CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(m, "process")), "test process") == 0);
  CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(m, "dropped")) == (double)dropped);
  cJSON *off = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "clock_offsets"), 0);
  CHECK(off && cJSON_GetNumberValue(cJSON_GetObjectItem(off, "offset_us")) == 250100);
  CHECK(off && cJSON_GetNumberValue(cJSON_GetObjectItem(off, "uncertainty_us")) == 200);
  CHECK(off && cJSON_GetNumberValue(cJSON_GetObjectItem(off, "samples")) == 3);
  cJSON_Delete(doc);
  free(text);
  remove(path);
  rmdir(dir);
  printf("timeline_test: %d passed, %d failed (%.1f ns an event off, %.1f on)\n", g_pass,
         g_fail, off_ns, on_ns);
  return g_fail != 0;
}
