/* tls_pki_tool DIR PREFIX: a throwaway CA with a server (ps) and a client (worker)
 * certificate, written into DIR as PREFIX-ca.pem, PREFIX-server.pem, PREFIX-server.key,
 * PREFIX-client.pem and PREFIX-client.key (common/tls_pki.h). For tests, on machines where the
 * openssl command cannot be assumed; a real cluster's certificates come from its own CA (the
 * openssl commands in common/tls.h). */
#include <stdio.h>
#include <string.h>

#include "common/tls_pki.h"

int main(int argc, char **argv) {
  if (argc != 3 || !argv[1][0] || !argv[2][0] || strchr(argv[2], '/')) {
    fprintf(stderr, "usage: tls_pki_tool DIR PREFIX (DIR must exist; PREFIX without '/')\n");
    return 2;
  }
  char err[512];
  if (pst_tls_pki_make(argv[1], argv[2], err, sizeof err) < 0) {
    fprintf(stderr, "tls_pki_tool: %s\n", err);
    return 1;
  }
  const char *names[] = {"ca.pem", "server.pem", "server.key", "client.pem", "client.key"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char p[1024];
    pst_tls_pki_path(p, sizeof p, argv[1], argv[2], names[i]);
    printf("%s\n", p);
  }
  return 0;
}
