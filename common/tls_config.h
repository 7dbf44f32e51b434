/* The daemons' TLS settings (issue 12): --tls-cert, --tls-key and --tls-ca, taken, checked and
 * explained the same way by pstrain-ps and pstrain-worker. Like every option they are also
 * config-file keys (tls-cert = ...) and environment variables (PSTRAIN_PS_TLS_CERT, ...);
 * without any of them, the files systemd's LoadCredential= hands over are used, as for the
 * cluster secret (deploy/install.sh --tls-cert, --tls-key, --tls-ca). */
#ifndef PSTRAIN_COMMON_TLS_CONFIG_H
#define PSTRAIN_COMMON_TLS_CONFIG_H

#include <stddef.h>

#include "common/config.h"
#include "common/tls.h"

/* The names LoadCredential= gives the files: $CREDENTIALS_DIRECTORY/pstrain-tls-cert, ... */
#define PST_TLS_CREDENTIAL_CERT "pstrain-tls-cert"
#define PST_TLS_CREDENTIAL_KEY "pstrain-tls-key"
#define PST_TLS_CREDENTIAL_CA "pstrain-tls-ca"

typedef struct {
  char cert[PST_CFG_STR_MAX];
  char key[PST_CFG_STR_MAX];
  char ca[PST_CFG_STR_MAX];
} pst_tls_files;

/* The three entries of a daemon's option table, filling the pst_tls_files variable `f`. */
#define PST_TLS_OPTS(f)                                                                        \
  PST_OPT("tls-cert", PST_CFG_STRING, (f).cert, "",                                            \
          "mutual TLS: this host's certificate, PEM (with --tls-key and --tls-ca; default: "   \
          "systemd credential " PST_TLS_CREDENTIAL_CERT ")", 0, 0),                            \
  PST_OPT("tls-key", PST_CFG_STRING, (f).key, "",                                              \
          "mutual TLS: the certificate's private key, PEM, unencrypted", 0, 0),                \
  PST_OPT("tls-ca", PST_CFG_STRING, (f).ca, "",                                                \
          "mutual TLS: the cluster's CA, PEM: peers' certificates must be signed by it", 0, 0)

/* The context of `role` for the settings in f: all three files, checked (readable, the key
 * not readable by others and matching the certificate, the certificate signed by the CA), or
 * with none of them set, the three systemd credentials when they are there. Returns 0 with
 * *out set, or with *out NULL when TLS is off (nothing given); a negative code with a one-line
 * reason naming the file or the missing setting otherwise. `desc` (may be NULL) gets where
 * the files came from, for the start-up log line. */
int pst_tls_config_load(pst_tls_role role, const pst_tls_files *f, pst_tls_ctx **out,
                        char *desc, size_t desclen, char *err, size_t errlen);

#endif
