/* A STATUS message as JSON (cJSON), the one shape `pstrain status --json` prints and the ps's
 * dashboard serves as /status.json. */
#ifndef PSTRAIN_PROTO_STATUS_JSON_H
#define PSTRAIN_PROTO_STATUS_JSON_H

#include <cjson/cJSON.h>

#include "proto/pstrain.pb-c.h"

/* "sync", "async" or "ssp". */
const char *pst_status_mode_name(Pstrain__Mode m);
/* "done", "abandoned", "training", "lost" or "absent". */
const char *pst_status_worker_state(const Pstrain__WorkerStatus *w);
/* The object (the caller's, freed with cJSON_Delete), or NULL when out of memory. ps_addr
 * is the "ps" field: the address the status came from. */
cJSON *pst_status_json(const Pstrain__Status *st, const char *ps_addr);

#endif
