/* cJSON documents to and from files, the one way the tools write and read their figures. */
#ifndef PSTRAIN_COMMON_JSON_FILE_H
#define PSTRAIN_COMMON_JSON_FILE_H

#include <cjson/cJSON.h>

/* Writes doc to path as JSON text and a newline (indented when pretty), replacing the
 * file. Returns 0 or a negative errno (-ENOMEM when doc cannot be printed). */
int pst_json_write_file(const char *path, const cJSON *doc, int pretty);
/* The JSON document in the file at path (free it with cJSON_Delete), or NULL when the file
 * cannot be read or is not JSON. */
cJSON *pst_json_read_file(const char *path);

#endif
