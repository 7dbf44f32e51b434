/* The connections to the ps shards as a group: whether all are open, closing them all,
 * sending to all, and ending the run with an error (which tells every shard why). Used by
 * every module of the training loop; calls only the client (worker/client.h). */
#include "worker/shards.h"

#include <stdarg.h>
#include <stdio.h>

#include "common/log.h"

/* Every shard's connection is open (registered or about to be). */
int wk_all_open(const wk_trainer *t) {
  for (int i = 0; i < t->n_ps; i++)
    if (t->ps[i].client.state != WK_CONN_OPEN) return 0;
  return 1;
}

void wk_close_all(wk_trainer *t) {
  for (int i = 0; i < t->n_ps; i++) wk_client_close(&t->ps[i].client, NULL);
}

/* Sends a control message to every shard: each keeps its own account of the workers
 * (registration, reports, heartbeats, the end). */
void wk_send_all(wk_trainer *t, const Pstrain__Header *h) {
  for (int i = 0; i < t->n_ps; i++)
    if (t->ps[i].client.state == WK_CONN_OPEN) wk_client_send(&t->ps[i].client, h);
}

/* Ends the run with an error: log it once, tell the ps why (so that it frees this worker's
 * slot with the reason in its log), close the connection, exit 1. */
void wk_fail(wk_trainer *t, const char *fmt, ...) {
  char why[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (t->state != WK_STOPPED) LOG_ERR("%s", why);
  if (t->state != WK_STOPPED) {
    Pstrain__Header h = PSTRAIN__HEADER__INIT;
    Pstrain__ErrorInfo e = PSTRAIN__ERROR_INFO__INIT;
    e.reason = why;
    h.type = PSTRAIN__MSG_TYPE__ERROR;
    h.error = &e;
    for (int i = 0; i < t->n_ps; i++)
      if (t->ps[i].client.state == WK_CONN_OPEN) wk_client_send_now(&t->ps[i].client, &h);
  }
  t->exit_code = PST_EXIT_FAILED;
  t->state = WK_STOPPED;
  wk_close_all(t);
}
