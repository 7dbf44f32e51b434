/* TLS sessions over memory buffers (common/tls.h); the contexts they are made from, and the
 * error helpers both share, are tls_context.c's (common/tls_internal.h).
 *
 * The session's BIO is our own in-memory BIO rather than OpenSSL's BIO_s_mem: its reads come
 * straight from the input buffer that libuv read into, and its writes land straight in the
 * block that goes to uv_write, so ciphertext is copied once each way between the socket and
 * OpenSSL's record buffer, where a pair of BIO_s_mem would add a copy on each side. */
#include "common/tls.h"
#include "common/tls_internal.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REC 16384                      /* most plaintext in one TLS record */
#define IN_MIN_FREE (REC + 512)        /* room handed out per read, at least one record */
#define OUT_CAP (PST_TLS_BLOCK + PST_TLS_BLOCK / 64 + 4096) /* one block's ciphertext */
#define OUT_POOL 4                     /* released blocks kept for reuse */

struct pst_tls_conn {
  SSL *ssl;
  pst_tls_role role;
  uint8_t *in;                 /* ciphertext read and not yet taken by OpenSSL */
  size_t in_cap, in_head, in_tail;
  uint64_t in_total;           /* bytes ever received: the first ones are checked for TLS */
  int in_eof;                  /* the transport's end of file */
  int started;
  int hs;                      /* 0 handshaking, 1 done, -1 failed */
  int failed;                  /* the failure's code, 0 while healthy */
  pst_tls_failure kind;        /* and its kind */
  uint8_t first[8];            /* a plaintext peer's first bytes */
  size_t first_n;
  int clean_eof;               /* close_notify received */
  int sent_close;
  pst_tls_out *out;            /* ciphertext being produced */
  pst_tls_out *pool;           /* released blocks */
  int pool_n;
  char err[256];
  uint8_t stage[REC];          /* small pieces of a scatter list, gathered into one record */
};

/* ---- the in-memory BIO ---- */

static int out_reserve(pst_tls_conn *c, size_t n) {
  pst_tls_out *o = c->out;
  if (!o) {
    if (c->pool) {
      o = c->pool;
      c->pool = o->next;
      c->pool_n--;
    } else {
      o = calloc(1, sizeof *o);
      if (!o) return -ENOMEM;
    }
    o->next = NULL;
    o->buf.len = 0;
    c->out = o;
  }
  if (o->buf.len + n <= o->cap) return 0;
  size_t cap = o->cap ? o->cap * 2 : OUT_CAP;
  if (cap < o->buf.len + n) cap = o->buf.len + n;
  char *p = realloc(o->buf.base, cap);
  if (!p) return -ENOMEM;
  o->buf.base = p;
  o->cap = cap;
  return 0;
}

static int bio_write(BIO *b, const char *data, int len) {
  pst_tls_conn *c = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  if (len <= 0) return 0;
  if (out_reserve(c, (size_t)len) < 0) return -1;
  memcpy(c->out->buf.base + c->out->buf.len, data, (size_t)len);
  c->out->buf.len += (size_t)len;
  return len;
}

static int bio_read(BIO *b, char *data, int len) {
  pst_tls_conn *c = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  size_t avail = c->in_tail - c->in_head;
  if (avail == 0) {
    if (c->in_eof) return 0;
    BIO_set_retry_read(b);
    return -1;
  }
  size_t n = avail < (size_t)len ? avail : (size_t)len;
  memcpy(data, c->in + c->in_head, n);
  c->in_head += n;
  if (c->in_head == c->in_tail) c->in_head = c->in_tail = 0;
  return (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  pst_tls_conn *c = BIO_get_data(b);
  (void)num, (void)ptr;
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1; /* the output is taken by pst_tls_take_out */
    case BIO_CTRL_PENDING:
      return c ? (long)(c->in_tail - c->in_head) : 0;
    case BIO_CTRL_EOF:
      return c && c->in_eof && c->in_tail == c->in_head;
    default:
      return 0;
  }
}

static BIO_METHOD *g_method;
static pthread_once_t g_method_once = PTHREAD_ONCE_INIT;

static void make_method(void) {
  BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "pstrain memory");
  if (!m) return;
  BIO_meth_set_write(m, bio_write);
  BIO_meth_set_read(m, bio_read);
  BIO_meth_set_ctrl(m, bio_ctrl);
  g_method = m;
}

/* ---- sessions ---- */

int pst_tls_conn_new(pst_tls_ctx *ctx, const char *peer_name, pst_tls_conn **out, char *err,
                     size_t errlen) {
  *out = NULL;
  pthread_once(&g_method_once, make_method);
  pst_tls_conn *c = calloc(1, sizeof *c);
  if (!c || !g_method) {
    free(c);
    tls_set_err(err, errlen, "TLS: out of memory");
    return -ENOMEM;
  }
  ERR_clear_error();
  c->role = ctx->role;
  c->ssl = SSL_new(ctx->ssl);
  BIO *bio = c->ssl ? BIO_new(g_method) : NULL;
  if (!bio) {
    tls_set_err(err, errlen, "TLS: cannot make a session: %s", tls_ossl_reason());
    ERR_clear_error();
    SSL_free(c->ssl);
    free(c);
    return -ENOMEM;
  }
  BIO_set_data(bio, c);
  BIO_set_init(bio, 1);
  SSL_set_bio(c->ssl, bio, bio);
  if (ctx->role == PST_TLS_SERVER)
    SSL_set_accept_state(c->ssl);
  else
    SSL_set_connect_state(c->ssl);
  if (peer_name && *peer_name) {
    /* An IP address is matched against the certificate's IP entries, a name against its
     * DNS entries (or CN). */
    X509_VERIFY_PARAM *vp = SSL_get0_param(c->ssl);
    if (X509_VERIFY_PARAM_set1_ip_asc(vp, peer_name) != 1) {
      ERR_clear_error();
      SSL_set_hostflags(c->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      if (SSL_set1_host(c->ssl, peer_name) != 1 ||
          (c->role == PST_TLS_CLIENT && SSL_set_tlsext_host_name(c->ssl, peer_name) != 1)) {
        tls_set_err(err, errlen, "TLS: cannot use '%s' as the peer's name", peer_name);
        ERR_clear_error();
        pst_tls_conn_free(c);
        return -EINVAL;
      }
    }
  }
  *out = c;
  return 0;
}

void pst_tls_conn_free(pst_tls_conn *c) {
  if (!c) return;
  SSL_free(c->ssl);
  free(c->in);
  pst_tls_out *lists[2] = {c->out, c->pool};
  for (int i = 0; i < 2; i++)
    for (pst_tls_out *o = lists[i], *next; o; o = next) {
      next = o->next;
      free(o->buf.base);
      free(o);
    }
  free(c);
}

/* Printable first bytes of what a peer sent, for "does not speak TLS" messages. */
static void sample(const uint8_t *p, size_t n, char *out, size_t outlen) {
  size_t k = 0;
  for (size_t i = 0; i < n && i < 16 && k + 2 < outlen; i++)
    out[k++] = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' ? (char)p[i] : '.';
  out[k] = '\0';
}

static int fail(pst_tls_conn *c, int code, pst_tls_failure kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(pst_tls_conn *c, int code, pst_tls_failure kind, const char *fmt, ...) {
  if (c->failed) return c->failed;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  c->failed = code;
  c->kind = kind;
  if (c->hs == 0) c->hs = -1;
  return code;
}

/* Turns an OpenSSL failure into a reason: who refused what, in words. */
static int fail_ssl(pst_tls_conn *c, int sslerr) {
  const char *stage = c->hs == 0 ? "TLS handshake failed" : "TLS session failed";
  unsigned long e = ERR_peek_error();
  int reason = e ? ERR_GET_REASON(e) : 0;
  long v = SSL_get_verify_result(c->ssl);
  int rc;
  if (c->in_eof && (sslerr == SSL_ERROR_SYSCALL || reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
    rc = fail(c, UV_EPROTO, PST_TLS_FAIL_BROKEN, "%s: the peer closed the connection%s", stage,
              c->hs == 0 ? " during the handshake (is it a TLS peer, and does it accept our "
                           "certificate?)"
                         : " in the middle of a TLS record");
  } else if (reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
    rc = fail(c, UV_EPROTO, PST_TLS_FAIL_REFUSED,
              "%s: the peer sent no certificate (a certificate signed by the "
              "cluster's CA is required)", stage);
  } else if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED && tls_verify_error_is_issuer(v)) {
    rc = fail(c, UV_EPROTO, PST_TLS_FAIL_REFUSED,
              "%s: the peer's certificate is not signed by our CA (%s)", stage,
              X509_verify_cert_error_string(v));
  } else if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED &&
             (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)) {
    rc = fail(c, UV_EPROTO, PST_TLS_FAIL_REFUSED,
              "%s: the peer's certificate does not carry the expected name (%s)",
              stage, X509_verify_cert_error_string(v));
  } else if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
    rc = fail(c, UV_EPROTO, PST_TLS_FAIL_REFUSED,
              "%s: the peer's certificate was refused: %s", stage,
              X509_verify_cert_error_string(v));
  } else if (reason >= SSL_AD_REASON_OFFSET && e && ERR_GET_LIB(e) == ERR_LIB_SSL) {
    /* An alert from the peer: it refused something of ours. A TLS 1.3 client hears of a
     * refused certificate after its own handshake finished, hence no stage test for those. */
    const char *hint = reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA
                           ? " (our certificate is not signed by the CA it trusts)"
                       : reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED
                           ? " (it requires a client certificate)"
                       : reason == SSL_R_TLSV1_ALERT_PROTOCOL_VERSION && c->hs == 0
                           ? " (TLS 1.3 is required)"
                           : "";
    rc = fail(c, UV_EPROTO, PST_TLS_FAIL_REFUSED,
              "%s: the peer refused the session: %s%s", stage, tls_ossl_reason(), hint);
  } else if (reason == SSL_R_DECRYPTION_FAILED_OR_BAD_RECORD_MAC) {
    rc = fail(c, UV_EPROTO, PST_TLS_FAIL_BROKEN,
              "%s: a record failed its integrity check (corrupted or forged data)",
              stage);
  } else if (c->hs == 1 && (reason == SSL_R_WRONG_VERSION_NUMBER ||
                            reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
                            reason == SSL_R_ENCRYPTED_LENGTH_TOO_LONG ||
                            reason == SSL_R_UNEXPECTED_RECORD)) {
    rc = fail(c, UV_EPROTO, PST_TLS_FAIL_BROKEN,
              "%s: the peer sent something that is not a TLS record (%s)", stage,
              tls_ossl_reason());
  } else if (sslerr == SSL_ERROR_SYSCALL || !e) {
    rc = fail(c, UV_EPROTO, PST_TLS_FAIL_BROKEN, "%s: unexpected end of the TLS stream", stage);
  } else {
    rc = fail(c, UV_EPROTO, PST_TLS_FAIL_BROKEN, "%s: %s", stage, tls_ossl_reason());
  }
  ERR_clear_error();
  return rc;
}

static int drive_handshake(pst_tls_conn *c) {
  if (c->failed) return c->failed;
  if (c->hs != 0) return 0;
  c->started = 1;
  ERR_clear_error();
  int r = SSL_do_handshake(c->ssl);
  if (r == 1) {
    c->hs = 1;
    return 0;
  }
  int e = SSL_get_error(c->ssl, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
  return fail_ssl(c, e);
}

int pst_tls_start(pst_tls_conn *c) { return c->started ? c->failed : drive_handshake(c); }

void pst_tls_in_buffer(pst_tls_conn *c, char **base, size_t *len) {
  if (c->in_head == c->in_tail) c->in_head = c->in_tail = 0;
  if (c->in_cap - c->in_tail < IN_MIN_FREE && c->in_head > 0) {
    memmove(c->in, c->in + c->in_head, c->in_tail - c->in_head);
    c->in_tail -= c->in_head;
    c->in_head = 0;
  }
  if (c->in_cap - c->in_tail < IN_MIN_FREE) {
    size_t cap = c->in_cap ? c->in_cap * 2 : PST_TLS_IN_BUF;
    uint8_t *p = realloc(c->in, cap);
    if (p) {
      c->in = p;
      c->in_cap = cap;
    }
  }
  *base = (char *)c->in + c->in_tail;
  *len = c->in_cap - c->in_tail;
}

int pst_tls_in_commit(pst_tls_conn *c, size_t n) {
  if (n == 0) return c->failed;
  const uint8_t *p = c->in + c->in_tail;
  c->in_tail += n;
  if (c->in_total == 0) {
    /* A TLS peer's first record is a handshake record (a server may answer with an alert).
     * Anything else is a plaintext peer, worth naming as such. */
    int ok = p[0] == 0x16 || (c->role == PST_TLS_CLIENT && p[0] == 0x15);
    if (!ok) {
      char s[24];
      sample(p, n, s, sizeof s);
      c->first_n = n < sizeof c->first ? n : sizeof c->first;
      memcpy(c->first, p, c->first_n);
      c->in_total += n;
      return fail(c, UV_EPROTO, PST_TLS_FAIL_PLAINTEXT,
                  "TLS handshake failed: the peer does not speak TLS (it sent "
                  "\"%s\" in the clear)", s);
    }
  }
  c->in_total += n;
  return drive_handshake(c);
}

int pst_tls_feed(pst_tls_conn *c, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n > 0) {
    char *base;
    size_t len;
    pst_tls_in_buffer(c, &base, &len);
    if (len == 0) return fail(c, -ENOMEM, PST_TLS_FAIL_BROKEN,
                              "TLS: out of memory buffering input");
    size_t k = n < len ? n : len;
    memcpy(base, p, k);
    int rc = pst_tls_in_commit(c, k);
    if (rc < 0) return rc;
    p += k;
    n -= k;
  }
  return c->failed;
}

void pst_tls_feed_eof(pst_tls_conn *c) {
  c->in_eof = 1;
  if (c->hs == 0 && c->in_total > 0) drive_handshake(c);
}

ssize_t pst_tls_readable(pst_tls_conn *c) {
  if (c->failed) return c->failed;
  if (c->clean_eof) return UV_EOF;
  if (c->hs == 0 && c->in_eof && c->in_total == 0 && c->role == PST_TLS_SERVER)
    return UV_EOF; /* a peer that left without a word (a port probe) */
  if (c->hs == 0) {
    int rc = drive_handshake(c);
    if (rc < 0) return rc;
    if (c->hs == 0) {
      if (!c->in_eof) return 0;
      /* A client that hears nothing back, or a handshake cut short, is a failure worth
       * its reason. */
      return fail(c, UV_EPROTO, PST_TLS_FAIL_BROKEN,
                  "TLS handshake failed: the peer closed the connection during "
                  "the handshake (is it a TLS peer, and does it accept our certificate?)");
    }
  }
  int p = SSL_pending(c->ssl);
  if (p > 0) return p;
  ERR_clear_error();
  char b;
  size_t got = 0;
  int r = SSL_peek_ex(c->ssl, &b, 1, &got);
  if (r == 1) {
    p = SSL_pending(c->ssl);
    return p > 0 ? p : (ssize_t)got;
  }
  int e = SSL_get_error(c->ssl, r);
  if (e == SSL_ERROR_ZERO_RETURN) {
    c->clean_eof = 1;
    return UV_EOF;
  }
  if (e == SSL_ERROR_WANT_READ && !c->in_eof) return 0;
  if (c->in_eof && c->in_tail == c->in_head && !SSL_has_pending(c->ssl) &&
      (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_SYSCALL ||
       ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
    /* The transport ended at a record boundary without close_notify: for pstrain, whose
     * frames carry their own lengths, the same as a plain TCP end of file (a truncated frame
     * shows in the frame reader). */
    ERR_clear_error();
    return UV_EOF;
  }
  return fail_ssl(c, e);
}

ssize_t pst_tls_read(pst_tls_conn *c, void *buf, size_t n) {
  ssize_t r = pst_tls_readable(c);
  if (r <= 0 || n == 0) return r;
  size_t want = (size_t)r < n ? (size_t)r : n, got = 0;
  ERR_clear_error();
  if (SSL_read_ex(c->ssl, buf, want, &got) != 1) return fail_ssl(c, SSL_get_error(c->ssl, 0));
  return (ssize_t)got;
}

static int write_raw(pst_tls_conn *c, const void *p, size_t n) {
  size_t done = 0;
  ERR_clear_error();
  if (SSL_write_ex(c->ssl, p, n, &done) != 1 || done != n)
    return fail_ssl(c, SSL_get_error(c->ssl, 0));
  return 0;
}

ssize_t pst_tls_write(pst_tls_conn *c, const uv_buf_t *bufs, int nbufs) {
  if (c->failed) return c->failed;
  if (c->hs != 1) return -EAGAIN;
  if (c->sent_close) return fail(c, -EPIPE, PST_TLS_FAIL_BROKEN, "TLS: write after close_notify");
  size_t total = 0, st = 0;
  for (int i = 0; i < nbufs; i++) {
    const uint8_t *p = (const uint8_t *)bufs[i].base;
    size_t n = bufs[i].len;
    total += n;
    while (n > 0) {
      if (st > 0 || n < REC) {
        /* Small pieces, and the start of a large one after them, fill one record. */
        size_t k = REC - st < n ? REC - st : n;
        memcpy(c->stage + st, p, k);
        st += k;
        p += k;
        n -= k;
        if (st == REC) {
          if (write_raw(c, c->stage, st) < 0) return c->failed;
          st = 0;
        }
      } else {
        if (write_raw(c, p, n) < 0) return c->failed;
        n = 0;
      }
    }
  }
  if (st > 0 && write_raw(c, c->stage, st) < 0) return c->failed;
  return (ssize_t)total;
}

int pst_tls_close_notify(pst_tls_conn *c) {
  if (c->hs != 1 || c->sent_close || c->failed) return c->failed;
  c->sent_close = 1;
  ERR_clear_error();
  int r = SSL_shutdown(c->ssl);
  if (r < 0) {
    int e = SSL_get_error(c->ssl, r);
    /* Wanting to read is the peer's close_notify still to come: ours is out. */
    if (e != SSL_ERROR_WANT_READ) return fail_ssl(c, e);
  }
  ERR_clear_error();
  return 0;
}

size_t pst_tls_pending_out(const pst_tls_conn *c) { return c->out ? c->out->buf.len : 0; }

pst_tls_out *pst_tls_take_out(pst_tls_conn *c) {
  pst_tls_out *o = c->out;
  if (!o || o->buf.len == 0) return NULL;
  c->out = NULL;
  return o;
}

void pst_tls_out_release(pst_tls_conn *c, pst_tls_out *o) {
  if (!o) return;
  if (c && c->pool_n < OUT_POOL && o->cap <= 4 * (size_t)OUT_CAP) {
    o->buf.len = 0;
    o->next = c->pool;
    c->pool = o;
    c->pool_n++;
    return;
  }
  free(o->buf.base);
  free(o);
}

int pst_tls_handshake_state(const pst_tls_conn *c) { return c->hs < 0 ? c->failed : c->hs; }

int pst_tls_has_input(const pst_tls_conn *c) {
  return c->in_tail > c->in_head || SSL_has_pending(c->ssl);
}

int pst_tls_clean_eof(const pst_tls_conn *c) { return c->clean_eof; }

const char *pst_tls_conn_error(const pst_tls_conn *c) { return c->err; }

pst_tls_failure pst_tls_conn_failure(const pst_tls_conn *c) {
  return c->failed ? c->kind : PST_TLS_FAIL_NONE;
}

size_t pst_tls_conn_first_bytes(const pst_tls_conn *c, void *buf, size_t len) {
  if (!c->failed || c->kind != PST_TLS_FAIL_PLAINTEXT) return 0;
  size_t n = c->first_n < len ? c->first_n : len;
  memcpy(buf, c->first, n);
  return n;
}

void pst_tls_conn_describe(const pst_tls_conn *c, char *buf, size_t len) {
  if (c->hs != 1) {
    snprintf(buf, len, "TLS (handshake %s)", c->hs < 0 ? "failed" : "in progress");
    return;
  }
  char cn[128] = "?";
  X509 *peer = SSL_get0_peer_certificate(c->ssl);
  if (peer && X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn,
                                        sizeof cn) < 0)
    snprintf(cn, sizeof cn, "?");
  snprintf(buf, len, "%s %s, peer CN=%s", SSL_get_version(c->ssl), SSL_get_cipher_name(c->ssl),
           peer ? cn : "(none)");
}
