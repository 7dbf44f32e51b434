#include "common/notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "common/log.h"

int pst_notify_enabled(void) {
  const char *s = getenv("NOTIFY_SOCKET");
  return s && s[0];
}

/* Failures are logged once at debug level only: a service manager that went away is no
 * reason to disturb training, and systemd itself reports a missing READY. */
static void send_state(const char *state) {
  if (!pst_notify_enabled()) return;
  static int failure_logged;
  int rc = sd_notify(0, state);
  if (rc < 0 && !failure_logged) {
    /* Once: with a watchdog every WATCHDOG_USEC / 2 it would otherwise fill the log. */
    failure_logged = 1;
    LOG_DEBUG("sd_notify(%.40s) failed: %s (further failures not logged)", state, strerror(-rc));
  }
}

void pst_notify_ready(void) { send_state("READY=1"); }

void pst_notify_stopping(void) { send_state("STOPPING=1"); }

void pst_notify_status(const char *fmt, ...) {
  if (!pst_notify_enabled()) return;
  char line[512] = "STATUS=";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + 7, sizeof line - 7, fmt, ap);
  va_end(ap);
  /* STATUS is a single line; a newline would start another assignment. */
  for (char *p = line; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  send_state(line);
}

static void on_watchdog(uv_timer_t *t) {
  (void)t;
  send_state("WATCHDOG=1");
}

static void on_status(uv_timer_t *t) {
  pst_heartbeat *hb = t->data;
  char now[sizeof hb->last_status];
  now[0] = '\0';
  hb->status_fn(hb->status_arg, now, sizeof now);
  if (!now[0] || strcmp(now, hb->last_status) == 0) return;
  memcpy(hb->last_status, now, sizeof now);
  pst_notify_status("%s", now);
}

int pst_heartbeat_start(pst_heartbeat *hb, uv_loop_t *loop, pst_status_fn status_fn, void *arg) {
  memset(hb, 0, sizeof *hb);
  if (!pst_notify_enabled()) return 0;
  hb->status_fn = status_fn;
  hb->status_arg = arg;
  uint64_t usec = 0;
  /* sd_watchdog_enabled() also checks WATCHDOG_PID, so a watchdog meant for another
   * process (our parent, say) is not ours to feed. */
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    uint64_t ms = usec / 2000;
    if (ms < 1) ms = 1;
    int rc = uv_timer_init(loop, &hb->watchdog);
    if (rc < 0) return rc;
    hb->watchdog_open = 1;
    hb->watchdog.data = hb;
    uv_timer_start(&hb->watchdog, on_watchdog, ms, ms);
    uv_unref((uv_handle_t *)&hb->watchdog);
    LOG_DEBUG("systemd watchdog: %.1f s, pinging every %.1f s", (double)usec / 1e6,
              (double)ms / 1e3);
  }
  if (status_fn) {
    int rc = uv_timer_init(loop, &hb->status);
    if (rc < 0) {
      pst_heartbeat_close(hb);
      return rc;
    }
    hb->status_open = 1;
    hb->status.data = hb;
    uv_timer_start(&hb->status, on_status, PST_NOTIFY_STATUS_MS, PST_NOTIFY_STATUS_MS);
    uv_unref((uv_handle_t *)&hb->status);
  }
  return 0;
}

void pst_heartbeat_close(pst_heartbeat *hb) {
  if (hb->watchdog_open && !uv_is_closing((uv_handle_t *)&hb->watchdog))
    uv_close((uv_handle_t *)&hb->watchdog, NULL);
  if (hb->status_open && !uv_is_closing((uv_handle_t *)&hb->status))
    uv_close((uv_handle_t *)&hb->status, NULL);
}
