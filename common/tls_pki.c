#include "common/tls_pki.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

void pst_tls_pki_path(char *out, size_t outlen, const char *dir, const char *prefix,
                      const char *name) {
  snprintf(out, outlen, "%s/%s-%s", dir, prefix, name);
}

static int add_ext(X509 *x, X509V3_CTX *v, int nid, const char *value) {
  X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, v, nid, value);
  if (!e) return -1;
  int ok = X509_add_ext(x, e, -1);
  X509_EXTENSION_free(e);
  return ok ? 0 : -1;
}

/* A certificate for key, signed by issuer (NULL: self-signed, a CA). */
static X509 *make_cert(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key,
                       const char *san, const char *eku, long serial) {
  X509 *x = X509_new();
  if (!x) return NULL;
  int ok = X509_set_version(x, 2) && ASN1_INTEGER_set(X509_get_serialNumber(x), serial) &&
           X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
           X509_gmtime_adj(X509_getm_notAfter(x), 10L * 365 * 86400) && X509_set_pubkey(x, key);
  X509_NAME *name = X509_get_subject_name(x);
  ok = ok && X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1,
                                        -1, 0);
  ok = ok && X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
  X509V3_CTX v;
  X509V3_set_ctx_nodb(&v);
  X509V3_set_ctx(&v, issuer ? issuer : x, x, NULL, NULL, 0);
  ok = ok && add_ext(x, &v, NID_basic_constraints, issuer ? "critical,CA:FALSE" : "critical,CA:TRUE") == 0;
  ok = ok && add_ext(x, &v, NID_key_usage,
                     issuer ? "critical,digitalSignature" : "critical,keyCertSign,cRLSign") == 0;
  ok = ok && add_ext(x, &v, NID_subject_key_identifier, "hash") == 0;
  if (issuer) ok = ok && add_ext(x, &v, NID_authority_key_identifier, "keyid:always") == 0;
  if (san) ok = ok && add_ext(x, &v, NID_subject_alt_name, san) == 0;
  if (eku) ok = ok && add_ext(x, &v, NID_ext_key_usage, eku) == 0;
  ok = ok && X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256()) > 0;
  if (!ok) {
    X509_free(x);
    return NULL;
  }
  return x;
}

static int write_pem(const char *path, X509 *cert, EVP_PKEY *key) {
  FILE *f = fopen(path, "w");
  if (!f) return -errno;
  if (key) fchmod(fileno(f), 0600);
  int ok = cert ? PEM_write_X509(f, cert) : PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
  if (fclose(f) != 0 || !ok) return ok ? -errno : -EIO;
  return 0;
}

int pst_tls_pki_make(const char *dir, const char *prefix, char *err, size_t errlen) {
  EVP_PKEY *ka = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
  EVP_PKEY *ks = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
  EVP_PKEY *kc = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
  char ca_cn[96];
  snprintf(ca_cn, sizeof ca_cn, "%.60s pstrain test CA", prefix);
  /* Serial numbers differ between calls, so two sets never look like one CA's. */
  static long serial = 1;
  X509 *ca = ka ? make_cert(ka, ca_cn, NULL, NULL, NULL, NULL, serial++) : NULL;
  X509 *sv = ca && ks ? make_cert(ks, "pstrain-ps", ca, ka, "DNS:localhost,IP:127.0.0.1",
                                  "serverAuth,clientAuth", serial++)
                      : NULL;
  X509 *cl = ca && kc ? make_cert(kc, "pstrain-worker", ca, ka, "DNS:pstrain-worker",
                                  "clientAuth", serial++)
                      : NULL;
  int rc = 0;
  if (!sv || !cl) {
    unsigned long e = ERR_peek_error();
    snprintf(err, errlen, "cannot make test certificates: %s",
             e && ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "OpenSSL failed");
    rc = -EIO;
  }
  struct {
    const char *name;
    X509 *cert;
    EVP_PKEY *key;
  } files[] = {{"ca.pem", ca, NULL},         {"server.pem", sv, NULL}, {"server.key", NULL, ks},
               {"client.pem", cl, NULL},     {"client.key", NULL, kc}};
  for (size_t i = 0; rc == 0 && i < sizeof files / sizeof files[0]; i++) {
    char path[1024];
    pst_tls_pki_path(path, sizeof path, dir, prefix, files[i].name);
    rc = write_pem(path, files[i].cert, files[i].key);
    if (rc < 0) snprintf(err, errlen, "cannot write %s: %s", path, strerror(-rc));
  }
  ERR_clear_error();
  X509_free(ca);
  X509_free(sv);
  X509_free(cl);
  EVP_PKEY_free(ka);
  EVP_PKEY_free(ks);
  EVP_PKEY_free(kc);
  return rc;
}
