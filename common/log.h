/* Logging shared by the daemons and the launcher.
 *
 * Lines go to stderr as "<LEVEL>pstrain-ps: message" when stderr is not a TTY, so
 * journald picks up the level from the sd-daemon style "<N>" prefix, and as
 * "pstrain-ps: message" on a TTY. Messages are single lines. */
#ifndef PSTRAIN_COMMON_LOG_H
#define PSTRAIN_COMMON_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

enum { PST_LOG_ERR = 3, PST_LOG_WARN = 4, PST_LOG_INFO = 6, PST_LOG_DEBUG = 7 };

/* Sets the program name shown in every line and the most verbose level printed. */
void pst_log_init(const char *prog, int max_level);
/* "error", "warning", "info" or "debug" to a level; -1 for anything else. */
int pst_log_level_parse(const char *name);
void pst_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Exit statuses shared by the daemons and the launcher, so that systemd and scripts can
 * tell a finished job from a stopped or failed one. */
enum {
  PST_EXIT_OK = 0,      /* training finished */
  PST_EXIT_FAILED = 1,  /* a failure: the job was aborted, or this process could not go on */
  PST_EXIT_USAGE = 2,   /* bad flags, files or configuration */
  PST_EXIT_STOPPED = 3, /* stopped on request before training finished (SIGTERM, or the ps
                         * was stopped): the units treat it as success and do not restart */
  PST_EXIT_CHECKPOINT = 4, /* the ps's final checkpoint was not written (disk full, I/O error):
                            * training ended, but a ps started again would resume from an
                            * older checkpoint (or none) and train that part again */
  PST_EXIT_INCOMPLETE = 5, /* the ps ended a job with part of the data never trained (a slot
                            * given up; the summary says which): not a finished job */
};

/* Makes a daemon's death never silent: SIGPIPE is ignored (a peer that resets a connection
 * fails that write with EPIPE instead of killing the process), and a crash signal (SIGSEGV,
 * SIGBUS, SIGFPE, SIGILL, SIGABRT) writes one log line naming it before the process dies of
 * it as it would have (core dump, and the signal as its status). */
void pst_log_guard_signals(void);

/* A budget for log lines that a peer can provoke (bad connections, failed handshakes): at
 * most `burst` lines per `period` seconds; when a new period opens, one line says how many
 * were suppressed in the last. */
typedef struct {
  double window_start;
  int in_window;
  uint64_t suppressed;
} pst_ratelimit;
/* Whether a line may be logged now (counts it either way). */
int pst_ratelimit_ok(pst_ratelimit *rl, int burst, double period);

#define LOG_ERR(...) pst_log(PST_LOG_ERR, __VA_ARGS__)
#define LOG_WARN(...) pst_log(PST_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) pst_log(PST_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) pst_log(PST_LOG_DEBUG, __VA_ARGS__)

/* Writes at most `max` bytes of untrusted data as printable text (hex escapes for the rest)
 * into out[outlen], so that a garbage frame can be logged without corrupting the log. */
void pst_log_sanitize(const void *data, size_t len, size_t max, char *out, size_t outlen);

#endif
