/* Readiness, status and watchdog for running under systemd (Type=notify), through
 * libsystemd's sd_notify.
 *
 * Every call is a no-op when NOTIFY_SOCKET is unset (started by hand, by the launcher or
 * by a test), so the daemons call them unconditionally:
 *   pst_notify_ready()        READY=1 once the daemon does its job (ps: listening;
 *                             worker: registered with the ps)
 *   pst_notify_status(...)    STATUS=one line shown by `systemctl status`
 *   pst_notify_stopping()     STOPPING=1 once shutdown has begun
 *
 * The heartbeat runs two timers on the daemon's own event loop: WATCHDOG=1 at half the
 * interval systemd asks for (WatchdogSec=, seen as WATCHDOG_USEC), so that a loop that
 * stops turning gets the service restarted, and a STATUS line from a callback every
 * second (sent only when it changed). Both timers are unreferenced, so they never keep
 * the loop alive; pst_heartbeat_close() closes them after uv_run() has returned, and one
 * more uv_run() lets their close callbacks run before uv_loop_close(). */
#ifndef PSTRAIN_COMMON_NOTIFY_H
#define PSTRAIN_COMMON_NOTIFY_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Milliseconds between periodic STATUS lines. */
#define PST_NOTIFY_STATUS_MS 1000

void pst_notify_ready(void);
void pst_notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pst_notify_stopping(void);
/* Whether NOTIFY_SOCKET is set (the other calls do nothing when it is not). */
int pst_notify_enabled(void);

/* Writes the current one-line status into buf[len]. */
typedef void (*pst_status_fn)(void *arg, char *buf, size_t len);

typedef struct {
  uv_timer_t watchdog;      /* WATCHDOG=1 every WATCHDOG_USEC / 2 */
  uv_timer_t status;        /* status_fn every PST_NOTIFY_STATUS_MS */
  int watchdog_open, status_open;
  pst_status_fn status_fn;
  void *status_arg;
  char last_status[256];
} pst_heartbeat;

/* Starts the timers that apply (none when NOTIFY_SOCKET is unset). status_fn may be NULL.
 * Returns 0 or a negative libuv error. */
int pst_heartbeat_start(pst_heartbeat *hb, uv_loop_t *loop, pst_status_fn status_fn, void *arg);
/* Closes whatever pst_heartbeat_start opened; safe to call more than once. */
void pst_heartbeat_close(pst_heartbeat *hb);

#endif
