/* Cluster authentication: every connection proves, before anything else is read, that both
 * ends hold the cluster secret, in a mutual challenge-response over fresh nonces (libsodium's
 * HMAC-SHA-256, compared in constant time).
 *
 *   worker -> ps   "PSTA" + nonce_w                     (PST_AUTH_HELLO_LEN bytes)
 *   ps -> worker   nonce_p + HMAC(k, "pstrain ps" | nonce_w | nonce_p)      (CHALLENGE_LEN)
 *   worker -> ps   HMAC(k, "pstrain worker" | nonce_p | nonce_w)           (PROOF_LEN)
 *
 * then the framed protocol (proto/README.md). The worker checks the ps's MAC before it sends
 * its own, so neither side talks to an impostor; the ps's fresh nonce makes a recorded
 * handshake useless on a new connection, and the two labels keep one side's MAC from being
 * reflected as the other's. The key is the BLAKE2b hash of the secret file's bytes, so any
 * file of at least 16 bytes (deploy/install.sh writes 32 random bytes, hex) will do. */
#ifndef PSTRAIN_COMMON_AUTH_H
#define PSTRAIN_COMMON_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define PST_AUTH_MAGIC "PSTA"
#define PST_AUTH_NONCE 32
#define PST_AUTH_MAC 32
#define PST_AUTH_HELLO_LEN (4 + PST_AUTH_NONCE)
#define PST_AUTH_CHALLENGE_LEN (PST_AUTH_NONCE + PST_AUTH_MAC)
#define PST_AUTH_PROOF_LEN PST_AUTH_MAC
/* The name systemd's LoadCredential= gives the secret: $CREDENTIALS_DIRECTORY/pstrain-secret. */
#define PST_AUTH_CREDENTIAL "pstrain-secret"

typedef struct {
  int set;           /* a secret was given */
  uint8_t key[32];
  char source[256];  /* where it came from, for logs */
} pst_secret;

/* The secret from `path` (a flag; "" for none), else from systemd's credential directory.
 * No secret anywhere is not an error (s->set = 0). A file that cannot be read, holds fewer
 * than 16 bytes, or that others can read (mode & 077, or for a file root owns, which its
 * group may read as a Kubernetes Secret's is, mode & 027) is: one line in err, -errno. */
int pst_secret_load(const char *path, pst_secret *s, char *err, size_t errlen);

/* One connection's handshake state, the same struct on both sides. */
typedef struct {
  uint8_t mine[PST_AUTH_NONCE], theirs[PST_AUTH_NONCE];
} pst_auth;

/* Worker: the first message (magic + a fresh nonce). */
void pst_auth_hello(pst_auth *a, uint8_t out[PST_AUTH_HELLO_LEN]);
/* ps: checks the first message and answers with its nonce and proof. -EPROTO when the bytes
 * are no auth hello (a client without the secret, or not a pstrain worker at all). */
int pst_auth_challenge(pst_auth *a, const pst_secret *s, const uint8_t hello[PST_AUTH_HELLO_LEN],
                       uint8_t out[PST_AUTH_CHALLENGE_LEN]);
/* Worker: checks the ps's proof and writes its own. -EACCES when the ps holds another secret. */
int pst_auth_respond(pst_auth *a, const pst_secret *s, const uint8_t challenge[PST_AUTH_CHALLENGE_LEN],
                     uint8_t out[PST_AUTH_PROOF_LEN]);
/* ps: checks the worker's proof. -EACCES when it was not made with the secret for this
 * connection's nonces. */
int pst_auth_verify(const pst_auth *a, const pst_secret *s, const uint8_t proof[PST_AUTH_PROOF_LEN]);

#endif
