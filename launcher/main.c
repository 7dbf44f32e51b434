/* pstrain: the launcher. `pstrain local ...` runs a job on this machine; see usage(). */
#include <stdio.h>
#include <string.h>

#include "launcher/commands.h"
#include "launcher/run/run_children.h"

typedef struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *help;
} command;

static const command g_commands[] = {
    {"local", pl_cmd_local, "train with one ps and N workers on this machine"},
    {"compare", pl_cmd_compare, "run sync, async, ssp on the same job: plots and a table"},
    {"bench", pl_cmd_bench, "push/pull throughput and latency against raw loopback TCP"},
    {"bench-train", pl_cmd_bench_train, "training samples/s for 1, 2, 4, 8 workers beside compute"},
    {"export", pl_cmd_export, "a checkpoint's weights as safetensors or npz, for inference"},
    {"status", pl_cmd_status, "a running ps's workers, versions, staleness and speed (--watch, --json)"},
    {"gpu-check", pl_cmd_gpu_check, "check everything GPU-related on this host; a report (--device cpu: dry run)"},
};

static void usage(FILE *out) {
  fprintf(out, "usage: pstrain COMMAND [--help | OPTIONS]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
    fprintf(out, "  %-10s %s\n", g_commands[i].name, g_commands[i].help);
  fprintf(out, "\nThe daemons themselves are pstrain-ps and pstrain-worker (each has --help).\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], PL_CHILD_CMD)) return pl_child_main(argc - 1, argv + 1);
  for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
    if (!strcmp(argv[1], g_commands[i].name)) return g_commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "pstrain: unknown command '%.60s' (try pstrain --help)\n", argv[1]);
  return 2;
}
