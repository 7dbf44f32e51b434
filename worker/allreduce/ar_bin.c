/* pstrain-worker-allreduce: what `pstrain-worker --mode allreduce` runs (worker/main.c execs it,
 * keeping its pid, so that mpirun follows the rank as it started it). A program of its own so
 * that only the all-reduce mode links Open MPI: a ps's worker, its container image and the GPU
 * bundle carry none of it. */
#include "worker/allreduce/allreduce.h"

int main(int argc, char **argv) { return wk_ar_main(argc, argv); }
