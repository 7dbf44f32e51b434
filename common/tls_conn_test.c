/* Tests of common/tls.h without sockets: contexts and their one-line errors (a missing file,
 * a key that does not match, a certificate of another CA, files that are not PEM, a bad suite
 * list), and a session pair over memory: handshake, scatter writes, close_notify, and an end of
 * file in and between records. Certificates are made at test time (common/tls_pki.h). */
#include <errno.h>
#include <stdint.h>
#include <uv.h>

#include "common/tls_testing.h"

/* ---- contexts ---- */

static void test_ctx_errors(void) {
  char err[512] = "";
  pst_tls_ctx *c = NULL;
  int rc = pst_tls_ctx_new(PST_TLS_SERVER, "/nonexistent/ps.pem", path("a", "server.key"),
                           path("a", "ca.pem"), &c, err, sizeof err);
  CHECK(rc == -ENOENT && has(err, "/nonexistent/ps.pem") && has(err, "No such file"),
        "missing certificate: rc %d, '%s'", rc, err);
  rc = pst_tls_ctx_new(PST_TLS_SERVER, path("a", "server.pem"), path("a", "client.key"),
                       path("a", "ca.pem"), &c, err, sizeof err);
  CHECK(rc < 0 && has(err, "does not match the certificate"), "mismatched key: '%s'", err);
  rc = pst_tls_ctx_new(PST_TLS_CLIENT, path("b", "client.pem"), path("b", "client.key"),
                       path("a", "ca.pem"), &c, err, sizeof err);
  CHECK(rc < 0 && has(err, "is not signed by the CA in"), "certificate of another CA: '%s'", err);
  rc = pst_tls_ctx_new(PST_TLS_SERVER, path("x", "garbage"), path("a", "server.key"),
                       path("a", "ca.pem"), &c, err, sizeof err);
  CHECK(rc < 0 && has(err, "not a PEM certificate"), "garbage certificate: '%s'", err);
  rc = pst_tls_ctx_new(PST_TLS_SERVER, path("a", "server.pem"), path("x", "garbage"),
                       path("a", "ca.pem"), &c, err, sizeof err);
  CHECK(rc < 0 && has(err, "not an unencrypted PEM private key"), "garbage key: '%s'", err);
  rc = pst_tls_ctx_new(PST_TLS_SERVER, path("a", "server.pem"), path("a", "server.key"),
                       path("x", "garbage"), &c, err, sizeof err);
  CHECK(rc < 0 && has(err, "no PEM certificate"), "garbage CA: '%s'", err);
  rc = pst_tls_ctx_new(PST_TLS_SERVER, NULL, NULL, path("a", "ca.pem"), &c, err, sizeof err);
  CHECK(rc < 0 && has(err, "no file given"), "server without a certificate: '%s'", err);
  c = ctx(PST_TLS_SERVER, path("a", "server.pem"), path("a", "server.key"), path("a", "ca.pem"));
  rc = pst_tls_ctx_set_ciphersuites(c, "TLS_NOPE", err, sizeof err);
  CHECK(rc < 0 && has(err, "TLS_NOPE"), "bad suite list: '%s'", err);
  pst_tls_ctx_free(c);
}

/* ---- a session pair over memory ---- */

/* Carries ciphertext both ways until nothing moves. */
static int shuttle(pst_tls_conn *a, pst_tls_conn *b) {
  for (int moved = 1; moved;) {
    moved = 0;
    pst_tls_conn *src[2] = {a, b}, *dst[2] = {b, a};
    for (int i = 0; i < 2; i++) {
      pst_tls_out *o = pst_tls_take_out(src[i]);
      if (!o) continue;
      int rc = pst_tls_feed(dst[i], o->buf.base, o->buf.len);
      pst_tls_out_release(src[i], o);
      moved = 1;
      if (rc < 0) return rc;
    }
  }
  return 0;
}

static int pair(pst_tls_ctx *sc, pst_tls_ctx *cc, pst_tls_conn **s, pst_tls_conn **c) {
  char err[256];
  if (pst_tls_conn_new(sc, NULL, s, err, sizeof err) < 0 ||
      pst_tls_conn_new(cc, "localhost", c, err, sizeof err) < 0)
    return -1;
  pst_tls_start(*c);
  return shuttle(*s, *c);
}

static void test_memory(pst_tls_ctx *sc, pst_tls_ctx *cc) {
  pst_tls_conn *s, *c;
  int rc = pair(sc, cc, &s, &c);
  CHECK(rc == 0 && pst_tls_handshake_state(s) == 1 && pst_tls_handshake_state(c) == 1,
        "memory handshake: rc %d, '%s' / '%s'", rc, pst_tls_conn_error(s), pst_tls_conn_error(c));
  static uint8_t payload[100000], got[100010];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 7 + 3);
  uv_buf_t bufs[2] = {uv_buf_init("0123456789", 10), uv_buf_init((char *)payload, sizeof payload)};
  ssize_t w = pst_tls_write(c, bufs, 2);
  CHECK(w == 100010, "scatter write took %zd", w);
  shuttle(s, c);
  size_t n = 0;
  for (ssize_t r; (r = pst_tls_read(s, got + n, sizeof got - n)) > 0;) n += (size_t)r;
  CHECK(n == 100010 && !memcmp(got, "0123456789", 10) && !memcmp(got + 10, payload, sizeof payload),
        "memory transfer: %zu bytes", n);
  char desc[200];
  pst_tls_conn_describe(s, desc, sizeof desc);
  CHECK(has(desc, "TLSv1.3") && has(desc, "CN=pstrain-worker"), "describe: '%s'", desc);
  CHECK(pst_tls_close_notify(c) == 0, "close_notify");
  shuttle(s, c);
  CHECK(pst_tls_read(s, got, sizeof got) == UV_EOF && pst_tls_clean_eof(s), "clean end");
  pst_tls_conn_free(s);
  pst_tls_conn_free(c);

  /* The transport ends in the middle of a record: an error, not an end of file. */
  pair(sc, cc, &s, &c);
  pst_tls_write(c, bufs, 2);
  pst_tls_out *o = pst_tls_take_out(c);
  pst_tls_feed(s, o->buf.base, o->buf.len / 2);
  pst_tls_out_release(c, o);
  pst_tls_feed_eof(s);
  n = 0;
  ssize_t r;
  while ((r = pst_tls_read(s, got + n, sizeof got - n)) > 0) n += (size_t)r;
  CHECK(r == UV_EPROTO && has(pst_tls_conn_error(s), "middle of a TLS record"),
        "truncated record: %zd '%s'", r, pst_tls_conn_error(s));
  pst_tls_conn_free(s);
  pst_tls_conn_free(c);

  /* The transport ends at a record boundary without close_notify: an end of file, unclean. */
  pair(sc, cc, &s, &c);
  pst_tls_feed_eof(s);
  CHECK(pst_tls_read(s, got, sizeof got) == UV_EOF && !pst_tls_clean_eof(s), "unclean end");
  pst_tls_conn_free(s);
  pst_tls_conn_free(c);
}

int main(void) {
  if (pki_setup() < 0) {
    printf("0 passed, 1 failed\n");
    return 1;
  }
  test_ctx_errors();
  pst_tls_ctx *srv = ctx(PST_TLS_SERVER, path("a", "server.pem"), path("a", "server.key"),
                         path("a", "ca.pem"));
  pst_tls_ctx *cli = ctx(PST_TLS_CLIENT, path("a", "client.pem"), path("a", "client.key"),
                         path("a", "ca.pem"));
  if (srv && cli) test_memory(srv, cli);
  pst_tls_ctx_free(srv);
  pst_tls_ctx_free(cli);
  return pki_done();
}
