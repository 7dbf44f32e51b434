#include "common/tls_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "--tls-key and --tls-ca" for the settings in f that are empty. */
static void missing(const pst_tls_files *f, const char *const names[3], char *out, size_t len) {
  const char *v[3] = {f->cert, f->key, f->ca};
  const char *m[3];
  int n = 0;
  for (int i = 0; i < 3; i++)
    if (!v[i][0]) m[n++] = names[i];
  if (n == 1)
    snprintf(out, len, "%s is", m[0]);
  else
    snprintf(out, len, "%s and %s are", m[0], m[1]);
}

/* The credentials' paths, when at least one of them is there (1), else 0. */
static int from_credentials(pst_tls_files *f) {
  const char *dir = getenv("CREDENTIALS_DIRECTORY");
  if (!dir || !dir[0]) return 0;
  const char *names[3] = {PST_TLS_CREDENTIAL_CERT, PST_TLS_CREDENTIAL_KEY, PST_TLS_CREDENTIAL_CA};
  char *dst[3] = {f->cert, f->key, f->ca};
  int any = 0;
  for (int i = 0; i < 3; i++) {
    char p[PST_CFG_STR_MAX];
    snprintf(p, sizeof p, "%.400s/%s", dir, names[i]);
    dst[i][0] = '\0';
    if (access(p, F_OK) == 0) {
      snprintf(dst[i], PST_CFG_STR_MAX, "%s", p);
      any = 1;
    }
  }
  return any;
}

int pst_tls_config_load(pst_tls_role role, const pst_tls_files *given, pst_tls_ctx **out,
                        char *desc, size_t desclen, char *err, size_t errlen) {
  *out = NULL;
  pst_tls_files f = *given;
  int n_set = !!f.cert[0] + !!f.key[0] + !!f.ca[0];
  const char *flags[3] = {"--tls-cert", "--tls-key", "--tls-ca"};
  const char *creds[3] = {PST_TLS_CREDENTIAL_CERT, PST_TLS_CREDENTIAL_KEY, PST_TLS_CREDENTIAL_CA};
  int cred = 0;
  if (n_set == 0) {
    if (!from_credentials(&f)) return 0; /* TLS is off */
    cred = 1;
    n_set = !!f.cert[0] + !!f.key[0] + !!f.ca[0];
  }
  /* Half a setting is a mistake worth stopping for: silently running without TLS would
   * leave the connections open to anyone on the network. */
  if (n_set < 3) {
    char m[120];
    missing(&f, cred ? creds : flags, m, sizeof m);
    if (cred)
      snprintf(err, errlen, "systemd credentials %s, %s and %s go together: %s missing",
               creds[0], creds[1], creds[2], m);
    else
      snprintf(err, errlen, "--tls-cert, --tls-key and --tls-ca go together: %s missing", m);
    return -EINVAL;
  }
  /* Like the cluster secret, a private key that anyone on the host may read is refused. Its
   * group may (Debian's ssl-cert group, say); systemd's credentials are the service's alone. */
  struct stat st;
  if (stat(f.key, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 007)) {
    snprintf(err, errlen, "TLS key %.300s can be read by others (mode %04o): chmod 600 it", f.key,
             (unsigned)(st.st_mode & 07777));
    return -EPERM;
  }
  int rc = pst_tls_ctx_new(role, f.cert, f.key, f.ca, out, err, errlen);
  if (rc < 0) return rc;
  if (desc)
    snprintf(desc, desclen, "certificate %.200s, peers checked against the CA in %.200s%s", f.cert,
             f.ca, cred ? " (systemd credentials)" : "");
  return 0;
}
