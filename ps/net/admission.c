/* Who gets in: with TLS, a certificate signed by the cluster's CA (common/tls.h, checked by
 * the connection's stream before any byte reaches the ps); the cluster secret's handshake
 * before anything else is read (common/auth.h), inside TLS when both are on;
 * --hello-timeout to authenticate and register, and --max-connections, with the oldest
 * connection that has not registered closed first so that real workers always get in.
 * Until it registers a connection holds its struct, a small reader (proto/wire.h,
 * pst_reader_init_small) and nothing else; log lines a peer can provoke are rate-limited. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/log.h"
#include "ps/net/conn.h"
#include "ps/ps.h"

/* The connection at the limit's expense: the oldest that has not registered. */
static ps_conn *oldest_unregistered(ps_server *s) {
  ps_conn *old = NULL;
  for (ps_conn *c = s->net->conns; c; c = c->next)
    if ((c->state == CONN_AUTH || c->state == CONN_OPEN) && (!old || c->opened_at < old->opened_at))
      old = c;
  return old;
}

int ps_admit(ps_server *s, ps_conn *c) {
  c->opened_at = pst_now();
  if (s->net->n_conns > s->opt.max_connections) {
    ps_conn *old = oldest_unregistered(s);
    if (old && old != c) {
      ps_log_conn(s->net, "%d connections (--max-connections %d): closing the oldest unregistered one, "
                     "from %s", s->net->n_conns, s->opt.max_connections, old->peer);
      ps_conn_close(old, NULL, 1);
    } else if (!old || old == c) {
      ps_log_conn(s->net, "%d connections (--max-connections %d), all registered: refusing %s",
                  s->net->n_conns, s->opt.max_connections, c->peer);
      return -EMFILE;
    }
  }
  if (s->opt.secret && s->opt.secret->set) {
    c->state = CONN_AUTH;
    c->hs_need = PST_AUTH_HELLO_LEN;
    return 0;
  }
  c->state = CONN_OPEN;
  return pst_reader_init_small(&c->rd, c->srv->net->frame_cbs, c);
}

/* Discards what the peer sent and nobody will read: closing on unread bytes would reset the
 * connection, and could lose on the way the ERROR frame that tells it why it is refused. */
static void drain_unread(ps_conn *c) {
  uv_os_fd_t fd;
  char junk[4096];
  if (uv_fileno((uv_handle_t *)&c->io.tcp, &fd) == 0)
    while (recv(fd, junk, sizeof junk, MSG_DONTWAIT) > 0) {
    }
}

void ps_refuse_plaintext(ps_conn *c) {
  /* Only a frame's sender gets a frame back: a worker with the secret but without TLS began
   * with the handshake's hello and reads the ps's challenge next, not a frame; it sees the
   * connection close, and its message says that the ps may require TLS. */
  uint8_t first[4];
  if (pst_tls_stream_first_bytes(&c->io, first, sizeof first) != sizeof first ||
      memcmp(first, "PSTR", 4) != 0)
    return;
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__ErrorInfo e = PSTRAIN__ERROR_INFO__INIT;
  e.reason = "this ps requires TLS: start the worker with the cluster's --tls-cert, --tls-key "
             "and --tls-ca";
  h.type = PSTRAIN__MSG_TYPE__ERROR;
  h.error = &e;
  uint8_t buf[256];
  int n = pst_wire_encode(&h, 0, buf, sizeof buf);
  if (n <= 0) return;
  /* Straight onto the TCP handle, past TLS, whose session failed before it sent a byte. */
  uv_buf_t b = uv_buf_init((char *)buf, (unsigned)n);
  uv_try_write((uv_stream_t *)&c->io.tcp, &b, 1);
  drain_unread(c);
}

void ps_auth_buffer(ps_conn *c, char **base, size_t *len) {
  /* Exactly the bytes of the handshake message still missing: a frame the worker sends
   * right after its proof stays in the socket for the reader. */
  *base = (char *)c->hs + c->hs_got;
  *len = c->hs_need - c->hs_got;
}

int ps_auth_read(ps_conn *c, size_t n) {
  ps_server *s = c->srv;
  c->hs_got += (uint32_t)n;
  /* A frame, or anything else that is no auth hello, is known by its first four bytes (a
   * worker's HELLO frame may be shorter than an auth hello). */
  int not_auth = c->hs_need == PST_AUTH_HELLO_LEN && c->hs_got >= 4 &&
                 memcmp(c->hs, PST_AUTH_MAGIC, 4) != 0;
  if (c->hs_got < c->hs_need && !not_auth) return 0;
  c->hs_got = 0;
  if (c->hs_need == PST_AUTH_HELLO_LEN) {
    uint8_t challenge[PST_AUTH_CHALLENGE_LEN];
    if (not_auth || pst_auth_challenge(&c->auth, s->opt.secret, c->hs, challenge) < 0) {
      /* A worker without the secret starts with a frame: tell it why, in a frame. */
      int framed = memcmp(c->hs, "PSTR", 4) == 0;
      int tls = c->hs[0] == 0x16 && c->hs[1] == 0x03; /* a TLS record: a handshake */
      ps_log_conn(s->net, "closing connection from %s: %s", c->peer,
                  framed ? "it did not authenticate (this ps needs the cluster secret)"
                  : tls  ? "a TLS handshake (the peer uses TLS, this ps runs without it)"
                         : "not a pstrain authentication");
      if (framed) {
        ps_send_error(c, "authentication required: this ps needs the cluster secret "
                         "(start the worker with the cluster's --secret-file)");
        /* The rest of its first frame is unread. */
        drain_unread(c);
      }
      ps_conn_close(c, NULL, 0);
      return -EACCES;
    }
    c->hs_need = PST_AUTH_PROOF_LEN;
    return ps_send_raw(c, challenge, sizeof challenge) < 0 ? -EIO : 0;
  }
  if (pst_auth_verify(&c->auth, s->opt.secret, c->hs) < 0) {
    ps_log_conn(s->net, "closing connection from %s: authentication failed (another secret, or a "
                   "replayed handshake)", c->peer);
    ps_conn_close(c, NULL, 1);
    return -EACCES;
  }
  memset(&c->auth, 0, sizeof c->auth);
  if (pst_reader_init_small(&c->rd, c->srv->net->frame_cbs, c) < 0) {
    ps_conn_close(c, "out of memory", 1);
    return -ENOMEM;
  }
  c->state = CONN_OPEN;
  return 1;
}

void ps_admission_watch(ps_server *s, double now) {
  for (ps_conn *c = s->net->conns, *next; c; c = next) {
    next = c->next;
    if ((c->state == CONN_AUTH || c->state == CONN_OPEN) &&
        now - c->opened_at > s->opt.hello_timeout) {
      ps_log_conn(s->net, "closing connection from %s: not %s within --hello-timeout %g s", c->peer,
                  c->state == CONN_AUTH ? "authenticated" : "registered", s->opt.hello_timeout);
      ps_conn_close(c, NULL, 1);
    }
  }
}

/* Rejected messages a worker may send before it is disconnected. */
#define PS_MAX_STRIKES 3

void ps_reject(ps_conn *c, const char *why) {
  ps_server *s = c->srv;
  if (c->worker < 0 || c->worker >= s->opt.workers) {
    /* ps/net/rules.h never strikes a connection without a worker; should a handler try, the
     * connection goes, and nothing is counted against a slot it does not hold. */
    s->net->rejected++;
    ps_log_conn(s->net, "closing connection from %s: %s", c->peer, why);
    ps_conn_close(c, NULL, 0);
    return;
  }
  c->strikes++;
  uint32_t on_slot = ps_slot_struck(&s->roster, c->worker);
  s->net->rejected++;
  ps_log_conn(s->net, "worker %d '%s' from %s: %s: rejected (%u on this connection, %u on the slot)",
              c->worker, s->roster.workers[c->worker].name, c->peer, why, c->strikes, on_slot);
  if (c->strikes >= PS_MAX_STRIKES) {
    char reason[200];
    snprintf(reason, sizeof reason, "%u invalid messages (the last: %.120s)", c->strikes, why);
    ps_send_error(c, reason);
    ps_conn_close(c, reason, 0);
  }
}
