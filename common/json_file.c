#include "common/json_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int pst_json_write_file(const char *path, const cJSON *doc, int pretty) {
  char *text = pretty ? cJSON_Print(doc) : cJSON_PrintUnformatted(doc);
  if (text == NULL) return -ENOMEM;
  FILE *f = fopen(path, "w");
  int rc = f ? 0 : -errno;
  if (f != NULL) {
    if (fprintf(f, "%s\n", text) < 0) rc = -EIO;
    if (fclose(f) != 0 && rc == 0) rc = -errno;
  }
  cJSON_free(text);
  return rc;
}

cJSON *pst_json_read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return NULL;
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  char chunk[4096];
  size_t n;
  while (m && (n = fread(chunk, 1, sizeof chunk, f)) > 0) fwrite(chunk, 1, n, m);
  fclose(f);
  if (m == NULL) return NULL;
  fclose(m);
  cJSON *doc = cJSON_ParseWithLength(text, len);
  free(text);
  return doc;
}
