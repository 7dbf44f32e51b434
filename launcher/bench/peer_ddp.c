/* PyTorch DDP beside pstrain (peer_ddp.h): the script is tools/ddp_bench.py, built into
 * bazel-bin/tools/pstrain-ddp-bench (found as the other programs are, pl_find_binary), and run
 * under /usr/bin/python3: Debian's python3-torch installs there, and the python3 first on a
 * user's PATH may be another one without it (PSTRAIN_PYTHON names another interpreter). */
#include "launcher/bench/peer_ddp.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/json_file.h"
#include "launcher/common/helpers.h"

extern char **environ;

const char *pl_peer_ddp_unfit(const pl_run_options *o) {
  if (strcmp(o->model, "mlp")) return "the peer's script trains the mlp only";
  if (o->optimizer && strcmp(o->optimizer, "adam")) return "the peer's script runs Adam only";
  if (o->device && strncmp(o->device, "cpu", 3)) return "the peer runs on the CPU only";
  if (o->gpus) return "the peer runs on the CPU only";
  if (o->data_flags && (o->data_flags->image_size[0] ||
                       (o->data_flags->augment[0] && strcmp(o->data_flags->augment, "none"))))
    return "the peer reads the 28x28 images as they are";
  if (o->lr_schedule && strcmp(o->lr_schedule, "constant"))
    return "the peer keeps the learning rate constant";
  return NULL;
}

int pl_peer_ddp_run(const pl_run_options *o, const char *dir, char *summary, size_t cap,
                    char *why, size_t whylen) {
  char script[PATH_MAX], log[PATH_MAX + 16], out[PATH_MAX + 16];
  const char *python = getenv("PSTRAIN_PYTHON");
  if (!python || !python[0]) python = "/usr/bin/python3";
  if (pl_find_binary("pstrain-ddp-bench", "tools", script, sizeof script) < 0) {
    snprintf(why, whylen, "no pstrain-ddp-bench next to the launcher (tools/ddp_bench.py)");
    return PL_PEER_SKIPPED;
  }
  if (access(python, X_OK) != 0) {
    snprintf(why, whylen, "no %s to run PyTorch with", python);
    return PL_PEER_SKIPPED;
  }
  snprintf(log, sizeof log, "%s/ddp.log", dir);
  snprintf(out, sizeof out, "%s/summary.json", dir);
  unlink(out);
  static pl_argv a; /* 256 KiB of argument store: not on the stack */
  memset(a.argv, 0, sizeof a.argv);
  a.n = 0;
  pl_argv_add(&a, "%s", python);
  pl_argv_add(&a, "%s", script);
  pl_argv_add(&a, "--workers=%d", o->workers);
  pl_argv_add(&a, "--batch-size=%d", o->batch_size);
  pl_argv_add(&a, "--epochs=%d", o->epochs);
  pl_argv_add(&a, "--lr=%.17g", o->lr);
  pl_argv_add(&a, "--seed=%lld", o->seed);
  pl_argv_add(&a, "--threads=%d", o->threads > 0 ? o->threads : 1);
  pl_argv_add(&a, "--data=%s", o->data_dir);
  pl_argv_add(&a, "--out=%s", out);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawn(&pid, python, &fa, NULL, a.argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    snprintf(why, whylen, "cannot start %s: %s", python, strerror(rc));
    return 1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    pl_last_line(log, why, whylen);
    if (!why[0]) snprintf(why, whylen, "the peer ended with status %d (log: %s)", status, log);
    if (WIFEXITED(status) && WEXITSTATUS(status) == PL_PEER_SKIPPED) return PL_PEER_SKIPPED;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  cJSON *doc = pst_json_read_file(out);
  if (!doc) {
    snprintf(why, whylen, "the peer wrote no readable summary (log: %s)", log);
    return 1;
  }
  char *line = cJSON_PrintUnformatted(doc);
  cJSON_Delete(doc);
  if (!line || strlen(line) >= cap) {
    free(line);
    snprintf(why, whylen, "the peer's summary is too long");
    return 1;
  }
  snprintf(summary, cap, "%s", line);
  free(line);
  return 0;
}
