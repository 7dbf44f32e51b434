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
