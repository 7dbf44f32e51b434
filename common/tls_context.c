/* TLS contexts (common/tls.h): a role's certificate, key and CA, loaded and checked once,
 * with their errors in words; and the error helpers that the sessions of tls.c share
 * (common/tls_internal.h). Sessions are tls.c's: this file calls nothing of it. */
#include <errno.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/tls.h"
#include "common/tls_internal.h"

/* ---- errors ---- */

void tls_set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* OpenSSL's reason for the oldest queued error, for one-line messages. */
const char *tls_ossl_reason(void) {
  unsigned long e = ERR_peek_error();
  const char *r = e ? ERR_reason_error_string(e) : NULL;
  return r ? r : "unknown OpenSSL error";
}

/* Keys protected by a passphrase would make OpenSSL prompt on the terminal: a daemon must
 * fail instead, with a reason. */
static int no_passphrase(char *buf, int size, int rwflag, void *u) {
  (void)buf, (void)size, (void)rwflag, (void)u;
  return -1;
}

/* ---- contexts ---- */

static int readable_file(const char *what, const char *path, char *err, size_t errlen) {
  if (!path || !*path) {
    tls_set_err(err, errlen, "TLS %s: no file given", what);
    return -EINVAL;
  }
  FILE *f = fopen(path, "r");
  if (!f) {
    int e = errno;
    tls_set_err(err, errlen, "TLS %s %s: %s", what, path, strerror(e));
    return -e;
  }
  fclose(f);
  return 0;
}

int tls_verify_error_is_issuer(long v) {
  return v == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
         v == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT || v == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT ||
         v == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN || v == X509_V_ERR_CERT_SIGNATURE_FAILURE ||
         v == X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE;
}

/* Our own certificate must verify against the CA we give peers to check it with: a mix-up
 * of files is then an error at start-up, not a refusal by every peer later. */
static int check_own_cert(SSL_CTX *ssl, pst_tls_role role, const char *cert, const char *ca,
                          char *err, size_t errlen) {
  X509 *leaf = SSL_CTX_get0_certificate(ssl);
  STACK_OF(X509) *chain = NULL;
  SSL_CTX_get0_chain_certs(ssl, &chain);
  X509_STORE_CTX *sc = X509_STORE_CTX_new();
  if (!sc || X509_STORE_CTX_init(sc, SSL_CTX_get_cert_store(ssl), leaf, chain) != 1) {
    X509_STORE_CTX_free(sc);
    tls_set_err(err, errlen, "TLS: out of memory checking %s", cert);
    return -ENOMEM;
  }
  X509_STORE_CTX_set_purpose(sc, role == PST_TLS_SERVER ? X509_PURPOSE_SSL_SERVER
                                                        : X509_PURPOSE_SSL_CLIENT);
  int ok = X509_verify_cert(sc) == 1;
  long v = X509_STORE_CTX_get_error(sc);
  X509_STORE_CTX_free(sc);
  if (ok) return 0;
  if (tls_verify_error_is_issuer(v))
    tls_set_err(err, errlen, "TLS certificate %s is not signed by the CA in %s (%s)", cert, ca,
            X509_verify_cert_error_string(v));
  else
    tls_set_err(err, errlen, "TLS certificate %s does not verify against the CA in %s: %s", cert,
            ca, X509_verify_cert_error_string(v));
  return -EINVAL;
}

static int load_key(SSL_CTX *ssl, const char *cert, const char *key, char *err, size_t errlen) {
  FILE *f = fopen(key, "r");
  if (!f) {
    int e = errno;
    tls_set_err(err, errlen, "TLS key %s: %s", key, strerror(e));
    return -e;
  }
  EVP_PKEY *pk = PEM_read_PrivateKey(f, NULL, no_passphrase, NULL);
  fclose(f);
  if (!pk) {
    tls_set_err(err, errlen, "TLS key %s: not an unencrypted PEM private key (%s)", key,
            tls_ossl_reason());
    return -EINVAL;
  }
  int rc = 0;
  if (X509_check_private_key(SSL_CTX_get0_certificate(ssl), pk) != 1) {
    tls_set_err(err, errlen, "TLS key %s does not match the certificate in %s", key, cert);
    rc = -EINVAL;
  } else if (SSL_CTX_use_PrivateKey(ssl, pk) != 1) {
    tls_set_err(err, errlen, "TLS key %s: %s", key, tls_ossl_reason());
    rc = -EINVAL;
  }
  EVP_PKEY_free(pk);
  return rc;
}

int pst_tls_ctx_new(pst_tls_role role, const char *cert, const char *key, const char *ca,
                    pst_tls_ctx **out, char *err, size_t errlen) {
  *out = NULL;
  int no_cert = (!cert || !*cert) && (!key || !*key) && role == PST_TLS_CLIENT;
  int rc;
  if ((!no_cert && ((rc = readable_file("certificate", cert, err, errlen)) < 0 ||
                    (rc = readable_file("key", key, err, errlen)) < 0)) ||
      (rc = readable_file("CA", ca, err, errlen)) < 0)
    return rc;
  ERR_clear_error();
  pst_tls_ctx *ctx = calloc(1, sizeof *ctx);
  SSL_CTX *ssl = SSL_CTX_new(role == PST_TLS_SERVER ? TLS_server_method() : TLS_client_method());
  if (!ctx || !ssl) {
    free(ctx);
    SSL_CTX_free(ssl);
    tls_set_err(err, errlen, "TLS: cannot make a context: %s", tls_ossl_reason());
    ERR_clear_error();
    return -ENOMEM;
  }
  ctx->ssl = ssl;
  ctx->role = role;
  SSL_CTX_set_default_passwd_cb(ssl, no_passphrase);
  SSL_CTX_set_min_proto_version(ssl, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(ssl, TLS1_3_VERSION);
  /* Connections are few and live for the whole job: resumption would only add state. */
  SSL_CTX_set_session_cache_mode(ssl, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ssl, 0);
  SSL_CTX_set_options(ssl, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_TICKET);
  /* Only the chain in the certificate file is sent: peers hold the CA already, and a CA
   * borrowed from our own trust store would only blur the reason of a refusal. */
  SSL_CTX_set_mode(ssl, SSL_MODE_NO_AUTO_CHAIN);
  rc = 0;
  if (!no_cert && SSL_CTX_use_certificate_chain_file(ssl, cert) != 1) {
    tls_set_err(err, errlen, "TLS certificate %s: not a PEM certificate (%s)", cert,
                tls_ossl_reason());
    rc = -EINVAL;
  }
  if (rc == 0 && !no_cert) rc = load_key(ssl, cert, key, err, errlen);
  if (rc == 0 && SSL_CTX_load_verify_file(ssl, ca) != 1) {
    tls_set_err(err, errlen, "TLS CA %s: no PEM certificate in it (%s)", ca, tls_ossl_reason());
    rc = -EINVAL;
  }
  if (rc == 0 && !no_cert) rc = check_own_cert(ssl, role, cert, ca, err, errlen);
  if (rc == 0 && role == PST_TLS_SERVER) {
    /* Tells clients which CA their certificate must come from. */
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca);
    if (names) SSL_CTX_set_client_CA_list(ssl, names);
  }
  ERR_clear_error();
  if (rc < 0) {
    pst_tls_ctx_free(ctx);
    return rc;
  }
  /* The server insists on a client certificate; both verify the peer against the CA. */
  SSL_CTX_set_verify(ssl, SSL_VERIFY_PEER |
                              (role == PST_TLS_SERVER ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
                     NULL);
  *out = ctx;
  return 0;
}

int pst_tls_ctx_set_ciphersuites(pst_tls_ctx *ctx, const char *list, char *err, size_t errlen) {
  if (!list || !*list) list = TLS_DEFAULT_CIPHERSUITES;
  ERR_clear_error();
  if (SSL_CTX_set_ciphersuites(ctx->ssl, list) != 1) {
    tls_set_err(err, errlen, "TLS: no usable TLS 1.3 cipher suite in '%s'", list);
    ERR_clear_error();
    return -EINVAL;
  }
  return 0;
}

pst_tls_role pst_tls_ctx_role(const pst_tls_ctx *ctx) { return ctx->role; }

void pst_tls_ctx_free(pst_tls_ctx *ctx) {
  if (!ctx) return;
  SSL_CTX_free(ctx->ssl);
  free(ctx);
}
