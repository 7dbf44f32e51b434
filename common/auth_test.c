/* The handshake without sockets: matching secrets agree both ways; another secret fails on
 * the side that checks it; a recorded handshake replayed against a new challenge fails; the
 * secret file's checks. */
#include "common/auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"

static void write_file(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  chmod(path, mode);
}

int main(void) {
  char dir[] = "/tmp/pstauthXXXXXX", a_path[64], b_path[64], err[512];
  if (!mkdtemp(dir)) return 1;
  snprintf(a_path, sizeof a_path, "%s/a", dir);
  snprintf(b_path, sizeof b_path, "%s/b", dir);
  write_file(a_path, "0123456789abcdef0123456789abcdef\n", 0600);
  write_file(b_path, "another secret, long enough", 0600);
  pst_secret sa, sa2, sb, none;
  CHECK(pst_secret_load(a_path, &sa, err, sizeof err) == 0 && sa.set);
  CHECK(pst_secret_load(a_path, &sa2, err, sizeof err) == 0 && !memcmp(sa.key, sa2.key, 32));
  CHECK(pst_secret_load(b_path, &sb, err, sizeof err) == 0 && memcmp(sa.key, sb.key, 32));
  unsetenv("CREDENTIALS_DIRECTORY");
  CHECK(pst_secret_load("", &none, err, sizeof err) == 0 && !none.set);
  /* systemd's LoadCredential=pstrain-secret:... */
  char cred[64];
  snprintf(cred, sizeof cred, "%s/pstrain-secret", dir);
  write_file(cred, "0123456789abcdef0123456789abcdef", 0400);
  setenv("CREDENTIALS_DIRECTORY", dir, 1);
  CHECK(pst_secret_load("", &sa2, err, sizeof err) == 0 && sa2.set && !memcmp(sa.key, sa2.key, 32));
  unsetenv("CREDENTIALS_DIRECTORY");
  /* Refused files. */
  write_file(b_path, "short", 0600);
  CHECK(pst_secret_load(b_path, &none, err, sizeof err) == -EINVAL && strstr(err, "at least 16"));
  write_file(b_path, "0123456789abcdef0123", 0644);
  CHECK(pst_secret_load(b_path, &none, err, sizeof err) == -EPERM && strstr(err, "chmod 600"));
  CHECK(pst_secret_load("/nonexistent/secret", &none, err, sizeof err) == -ENOENT);
  /* Group-readable: only a file root owns (a Kubernetes Secret: root's, the pod's fsGroup,
   * 0440), and never group-writable. Only root can make the files of both owners. */
  if (geteuid() == 0) {
    write_file(b_path, "0123456789abcdef0123", 0440);
    CHECK(chown(b_path, 0, 65532) == 0);
    CHECK(pst_secret_load(b_path, &sb, err, sizeof err) == 0 && sb.set);
    write_file(b_path, "0123456789abcdef0123", 0460);
    CHECK(pst_secret_load(b_path, &none, err, sizeof err) == -EPERM);
    write_file(b_path, "0123456789abcdef0123", 0640);
    CHECK(chown(b_path, 65532, 65532) == 0);
    CHECK(pst_secret_load(b_path, &none, err, sizeof err) == -EPERM && strstr(err, "chmod 600"));
    CHECK(chown(b_path, 0, 0) == 0);
  }

  /* A good handshake. */
  pst_auth w, p;
  uint8_t hello[PST_AUTH_HELLO_LEN], chal[PST_AUTH_CHALLENGE_LEN], proof[PST_AUTH_PROOF_LEN];
  pst_auth_hello(&w, hello);
  CHECK(pst_auth_challenge(&p, &sa, hello, chal) == 0);
  CHECK(pst_auth_respond(&w, &sa, chal, proof) == 0);
  CHECK(pst_auth_verify(&p, &sa, proof) == 0);
  /* The worker with another secret refuses the ps's proof; a ps with another secret refuses
   * a proof made with the right one for other nonces. */
  pst_auth w2, p2;
  uint8_t hello2[PST_AUTH_HELLO_LEN], chal2[PST_AUTH_CHALLENGE_LEN], proof2[PST_AUTH_PROOF_LEN];
  pst_auth_hello(&w2, hello2);
  CHECK(pst_auth_challenge(&p2, &sa, hello2, chal2) == 0);
  CHECK(pst_auth_respond(&w2, &sb, chal2, proof2) == -EACCES);
  CHECK(pst_auth_verify(&p2, &sb, proof) == -EACCES);
  /* Replay: the recorded hello and proof against a fresh challenge. */
  pst_auth p3;
  uint8_t chal3[PST_AUTH_CHALLENGE_LEN];
  CHECK(pst_auth_challenge(&p3, &sa, hello, chal3) == 0);
  CHECK(memcmp(chal3, chal, PST_AUTH_NONCE) != 0);
  CHECK(pst_auth_verify(&p3, &sa, proof) == -EACCES);
  /* Reflection: the ps's own MAC is no worker proof. */
  CHECK(pst_auth_verify(&p, &sa, chal + PST_AUTH_NONCE) == -EACCES);
  /* Not an auth hello (a plain frame). */
  uint8_t frame[PST_AUTH_HELLO_LEN] = "PSTR";
  CHECK(pst_auth_challenge(&p3, &sa, frame, chal3) == -EPROTO);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) g_fail++;
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
