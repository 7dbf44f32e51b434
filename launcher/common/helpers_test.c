/* launcher/common/helpers.c in-process: the small parsers and a command line being built. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "launcher/common/helpers.h"

int main(void) {
  int ids[4];
  CHECK(pl_parse_int_list("0,2,3", ids, 4, 0, 1023) == 3 && ids[0] == 0 && ids[2] == 3);
  CHECK(pl_parse_int_list("", ids, 4, 0, 1023) == 0);
  CHECK(pl_parse_int_list("1,x", ids, 4, 0, 1023) == -EINVAL);
  CHECK(pl_parse_int_list("1024", ids, 4, 0, 1023) == -EINVAL);
  CHECK(pl_parse_int_list("1,2,3,4,5", ids, 4, 0, 1023) == -E2BIG);

  CHECK(pl_json_num("{\"a\":1.5,\"b\":\"x\"}", "a") == 1.5);
  CHECK(pl_json_num("{\"a\":1.5,\"b\":\"x\"}", "b") == -1);
  CHECK(pl_json_num("not json", "a") == -1);

  static pl_argv a;
  memset(&a, 0, sizeof a);
  pl_argv_add(&a, "prog");
  pl_argv_add(&a, "--workers=%d", 3);
  CHECK(a.n == 2 && !strcmp(a.argv[1], "--workers=3") && a.argv[2] == NULL);
  for (int i = 0; i < PL_MAX_ARGS + 5; i++) pl_argv_add(&a, "x");
  CHECK(a.n == PL_MAX_ARGS && a.argv[PL_MAX_ARGS] == NULL);
  char **copy = pl_argv_dup(a.argv, 2);
  CHECK(copy && !strcmp(copy[0], "prog") && !strcmp(copy[1], "--workers=3") && !copy[2]);
  for (int i = 0; copy && copy[i]; i++) free(copy[i]);
  free(copy);

  char path[PATH_MAX];
  setenv("PATH", "/bin:/usr/bin", 1);
  CHECK(pl_find_program("sh", NULL, path, sizeof path) == 0);
  CHECK(pl_find_program("no-such-program-pstrain", "/nowhere", path, sizeof path) == -ENOENT);
  int port = pl_free_port();
  CHECK(port > 0 && port < 65536);

  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
