/* --on-finish wait: what a ps does once its job has finished when it must not exit.
 *
 * A Kubernetes StatefulSet restarts a pod's container whatever its exit status (its pods'
 * restartPolicy is Always), so a ps that exits when the job is done would be started again,
 * find the finished job in its checkpoints, exit again, and so on, backing off: a pod in
 * CrashLoopBackOff for a job that went well. With --on-finish wait the ps stays up instead,
 * doing nothing but answer its metrics port (/healthz 200, /readyz 503 with the reason,
 * /metrics with pstrain_job_finished 1) until SIGTERM or SIGINT, and then exits 0. */
#ifndef PSTRAIN_PS_LINGER_H
#define PSTRAIN_PS_LINGER_H

/* Waits as above, serving metrics_listen (empty: no port, only the wait). `why` is the
 * finished job's one-line description. Returns the exit status: 0, or 1 when the port
 * cannot be opened (logged). */
int ps_linger(const char *metrics_listen, const char *why);

#endif
