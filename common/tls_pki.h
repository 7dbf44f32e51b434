/* A throwaway certificate authority with a server and a client certificate, made with
 * OpenSSL's API (nothing downloaded, no openssl command needed), for tests and benchmarks of
 * common/tls.h. A real cluster's certificates come from its own CA (see common/tls.h). */
#ifndef PSTRAIN_COMMON_TLS_PKI_H
#define PSTRAIN_COMMON_TLS_PKI_H

#include <stddef.h>

/* Writes into dir (which must exist), each name starting with prefix and '-':
 *   ca.pem                     a self-signed CA (CN=<prefix> pstrain test CA)
 *   server.pem, server.key     CN=pstrain-ps, subjectAltName DNS:localhost, IP:127.0.0.1
 *   client.pem, client.key     CN=pstrain-worker, subjectAltName DNS:pstrain-worker
 * EC P-256 keys (unencrypted, mode 0600), SHA-256 signatures, valid from an hour ago for ten
 * years. Returns 0 or a negative code with a one-line reason. */
int pst_tls_pki_make(const char *dir, const char *prefix, char *err, size_t errlen);

/* The path of one of those files: dir/prefix-name. */
void pst_tls_pki_path(char *out, size_t outlen, const char *dir, const char *prefix,
                      const char *name);

#endif
