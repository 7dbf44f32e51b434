/* Logging shared by the daemons and the launcher.
 *
 * Lines go to stderr as "<LEVEL>pstrain-ps: message" when stderr is not a TTY, so
 * journald picks up the level from the sd-daemon style "<N>" prefix, and as
 * "pstrain-ps: message" on a TTY. Messages are single lines. */
#ifndef PSTRAIN_COMMON_LOG_H
#define PSTRAIN_COMMON_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum { PST_LOG_ERR = 3, PST_LOG_WARN = 4, PST_LOG_INFO = 6, PST_LOG_DEBUG = 7 };

/* Sets the program name shown in every line and the most verbose level printed. */
void pst_log_init(const char *prog, int max_level);
/* "error", "warning", "info" or "debug" to a level; -1 for anything else. */
int pst_log_level_parse(const char *name);
void pst_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOG_ERR(...) pst_log(PST_LOG_ERR, __VA_ARGS__)
#define LOG_WARN(...) pst_log(PST_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) pst_log(PST_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) pst_log(PST_LOG_DEBUG, __VA_ARGS__)

/* Writes at most `max` bytes of untrusted data as printable text (hex escapes for the rest)
 * into out[outlen], so that a garbage frame can be logged without corrupting the log. */
void pst_log_sanitize(const void *data, size_t len, size_t max, char *out, size_t outlen);

#endif
