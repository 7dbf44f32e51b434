/* Sending control frames on a connection (ERROR, SHUTDOWN, any header, a few raw bytes):
 * written at once, or, while an I/O thread writes reply chunks on the socket (ps/net/io.h),
 * kept in order behind them. The bottom of ps/net/: it calls no other file of the folder. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "proto/send.h"
#include "proto/wire.h"
#include "ps/net/conn.h"

/* Keeps a copy of a frame for after c's write job (ps/net/conn.h): written now, it would land in
 * the middle of the reply chunks the I/O thread is sending. */
static int defer_frame(ps_conn *c, const void *bytes, size_t n) {
  ps_deferred *d = malloc(sizeof *d + n);
  if (!d) return -ENOMEM;
  d->next = NULL;
  d->n = n;
  memcpy(d->bytes, bytes, n);
  if (c->deferred_tail) c->deferred_tail->next = d;
  else c->deferred = d;
  c->deferred_tail = d;
  return 0;
}

void ps_send_deferred(ps_conn *c) {
  while (c->deferred) {
    ps_deferred *d = c->deferred;
    c->deferred = d->next;
    /* A failing stream drops the rest: the connection is going anyway. */
    if (pst_send_copy(&c->io, d->bytes, d->n) == 0) c->srv->net->bytes_out += d->n;
    free(d);
  }
  c->deferred_tail = NULL;
}

int ps_send_header(ps_conn *c, const Pstrain__Header *h) {
  if (c->state == CONN_CLOSING) return -ECANCELED;
  c->last_tx = pst_now();
  if (ps_io_busy(&c->wjob)) {
    size_t need = protobuf_c_message_get_packed_size(&h->base) + PST_WIRE_PREFIX_LEN;
    uint8_t *buf = malloc(need);
    if (!buf) return -ENOMEM;
    int n = pst_wire_encode(h, 0, buf, need);
    int rc = n < 0 ? n : defer_frame(c, buf, (size_t)n);
    free(buf);
    return rc;
  }
  int n = pst_send_header(&c->io, h);
  if (n < 0) return n;
  c->srv->net->bytes_out += (uint64_t)n;
  return 0;
}

int ps_send_raw(ps_conn *c, const void *bytes, size_t n) {
  if (c->state == CONN_CLOSING) return -ECANCELED;
  c->last_tx = pst_now();
  if (ps_io_busy(&c->wjob)) return defer_frame(c, bytes, n);
  int rc = pst_send_copy(&c->io, bytes, n);
  if (rc == 0) c->srv->net->bytes_out += (uint64_t)n;
  return rc;
}

void ps_send_error(ps_conn *c, const char *reason) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__ErrorInfo e = PSTRAIN__ERROR_INFO__INIT;
  e.reason = (char *)reason;
  h.type = PSTRAIN__MSG_TYPE__ERROR;
  h.error = &e;
  ps_send_header(c, &h);
}

void ps_send_shutdown(ps_conn *c, const char *reason, int failed, int stopped) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Shutdown sd = PSTRAIN__SHUTDOWN__INIT;
  sd.reason = (char *)reason;
  sd.failed = failed != 0;
  sd.stopped = stopped != 0;
  h.type = PSTRAIN__MSG_TYPE__SHUTDOWN;
  h.shutdown = &sd;
  ps_send_header(c, &h);
}
