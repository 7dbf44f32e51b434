/* Internal to common/'s TLS library (tls.c and tls_context.c); not part of the API of
 * common/tls.h. tls_context.c owns the contexts and the error helpers below; tls.c makes
 * sessions from a context and calls them, and tls_context.c calls nothing of tls.c. */
#ifndef PSTRAIN_COMMON_TLS_INTERNAL_H
#define PSTRAIN_COMMON_TLS_INTERNAL_H

#include <stddef.h>

#include <openssl/ssl.h>

#include "common/tls.h"

struct pst_tls_ctx {
  SSL_CTX *ssl;
  pst_tls_role role;
};

/* Writes a message into err[errlen] (nothing when err is NULL or errlen 0). */
void tls_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* OpenSSL's reason for the oldest queued error, for one-line messages. */
const char *tls_ossl_reason(void);

/* Whether a verification error means that a certificate is not signed by the CA given. */
int tls_verify_error_is_issuer(long v);

#endif
