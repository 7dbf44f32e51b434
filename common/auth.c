#include "common/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET_MIN 16
#define SECRET_MAX 4096

/* sodium_init is idempotent and thread-safe; every entry point that needs randomness or
 * the MACs calls it first. */
static void init_once(void) {
  if (sodium_init() < 0) abort(); /* no entropy source at all: nothing is safe */
}

static int read_secret(const char *path, pst_secret *s, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    snprintf(err, errlen, "cannot read the cluster secret %.200s: %s", path, strerror(e));
    return -e;
  }
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    snprintf(err, errlen, "the cluster secret %.200s is not a regular file", path);
    return -EINVAL;
  }
  /* Only its owner may read the secret, except that a file root owns may also be read by
   * its group (0640, 0440), which root chose, as PostgreSQL allows for its key: that is how
   * Kubernetes hands a Secret to a pod that runs as another user (kubelet makes the files
   * root's, of the pod's fsGroup, mode 0440). Never by others, never written by the group. */
  int group_may_read = st.st_uid == 0 && !(st.st_mode & 020);
  if ((st.st_mode & 007) || ((st.st_mode & 070) && !group_may_read)) {
    close(fd);
    snprintf(err, errlen, "the cluster secret %.200s can be read by others (mode %04o): chmod 600 it",
             path, (unsigned)(st.st_mode & 07777));
    return -EPERM;
  }
  uint8_t buf[SECRET_MAX];
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  /* Trailing white space (a newline from an editor or `echo`) is not part of the secret. */
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) n--;
  if (n < SECRET_MIN) {
    sodium_memzero(buf, sizeof buf);
    snprintf(err, errlen, "the cluster secret %.200s holds %zd bytes; it needs at least %d",
             path, n < 0 ? (ssize_t)0 : n, SECRET_MIN);
    return -EINVAL;
  }
  crypto_generichash(s->key, sizeof s->key, buf, (size_t)n, NULL, 0);
  sodium_memzero(buf, sizeof buf);
  s->set = 1;
  snprintf(s->source, sizeof s->source, "%.250s", path);
  return 0;
}

int pst_secret_load(const char *path, pst_secret *s, char *err, size_t errlen) {
  init_once();
  memset(s, 0, sizeof *s);
  if (path && path[0]) return read_secret(path, s, err, errlen);
  const char *dir = getenv("CREDENTIALS_DIRECTORY");
  if (!dir || !dir[0]) return 0;
  char cred[1024];
  snprintf(cred, sizeof cred, "%s/%s", dir, PST_AUTH_CREDENTIAL);
  if (access(cred, F_OK) != 0) return 0;
  return read_secret(cred, s, err, errlen);
}

/* HMAC(key, label | a | b). */
static void mac(const pst_secret *s, const char *label, const uint8_t *a, const uint8_t *b,
                uint8_t out[PST_AUTH_MAC]) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, s->key, sizeof s->key);
  crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label) + 1);
  crypto_auth_hmacsha256_update(&st, a, PST_AUTH_NONCE);
  crypto_auth_hmacsha256_update(&st, b, PST_AUTH_NONCE);
  crypto_auth_hmacsha256_final(&st, out);
}

void pst_auth_hello(pst_auth *a, uint8_t out[PST_AUTH_HELLO_LEN]) {
  init_once();
  randombytes_buf(a->mine, sizeof a->mine);
  memcpy(out, PST_AUTH_MAGIC, 4);
  memcpy(out + 4, a->mine, PST_AUTH_NONCE);
}

int pst_auth_challenge(pst_auth *a, const pst_secret *s, const uint8_t hello[PST_AUTH_HELLO_LEN],
                       uint8_t out[PST_AUTH_CHALLENGE_LEN]) {
  init_once();
  if (memcmp(hello, PST_AUTH_MAGIC, 4) != 0) return -EPROTO;
  memcpy(a->theirs, hello + 4, PST_AUTH_NONCE);
  randombytes_buf(a->mine, sizeof a->mine);
  memcpy(out, a->mine, PST_AUTH_NONCE);
  mac(s, "pstrain ps", a->theirs, a->mine, out + PST_AUTH_NONCE);
  return 0;
}

int pst_auth_respond(pst_auth *a, const pst_secret *s, const uint8_t challenge[PST_AUTH_CHALLENGE_LEN],
                     uint8_t out[PST_AUTH_PROOF_LEN]) {
  uint8_t expect[PST_AUTH_MAC];
  memcpy(a->theirs, challenge, PST_AUTH_NONCE);
  mac(s, "pstrain ps", a->mine, a->theirs, expect);
  int ok = sodium_memcmp(expect, challenge + PST_AUTH_NONCE, PST_AUTH_MAC) == 0;
  if (!ok) return -EACCES;
  mac(s, "pstrain worker", a->theirs, a->mine, out);
  return 0;
}

int pst_auth_verify(const pst_auth *a, const pst_secret *s, const uint8_t proof[PST_AUTH_PROOF_LEN]) {
  uint8_t expect[PST_AUTH_MAC];
  mac(s, "pstrain worker", a->mine, a->theirs, expect);
  return sodium_memcmp(expect, proof, PST_AUTH_MAC) == 0 ? 0 : -EACCES;
}
