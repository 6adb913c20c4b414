/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h - diagnostics for shardfs.
 *
 * Messages go to stderr while the process has a terminal or runs in the
 * foreground, and once the daemon has detached to the -o log= file, or to
 * syslog (the journal); without a syslog socket (containers) a warning
 * says, before the detach, that they would be lost.  Error messages are
 * counted wherever they go (.shardfs/stats "logged_errors").
 * Every line carries the program name so that mount helpers and systemd
 * show where it came from.
 *
 * Thread-safety: all functions may be called from any thread; each message
 * is written with a single write(2) (or syslog(3)) so lines never interleave.
 */
#ifndef SHARDFS_LOG_H
#define SHARDFS_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

enum log_level {
	LOG_LEVEL_ERROR,	/* the operation or the mount failed */
	LOG_LEVEL_WARN,		/* input was skipped or repaired */
	LOG_LEVEL_INFO,		/* one-off facts: summary, capabilities */
	LOG_LEVEL_DEBUG,	/* per-request detail, only with -d */
};

/* Messages above this level are dropped.  Default LOG_LEVEL_INFO. */
void log_set_level(enum log_level level);

/* Parse "error", "warn", "info" or "debug"; return 0 or -EINVAL. */
int log_parse_level(const char *name, enum log_level *level);

/* Start every line with "@name: " instead of "shardfs: " (a static string). */
void log_set_program(const char *name);

/* Open @path (appending) for the messages after log_detach(); 0 or -errno. */
int log_use_file(const char *path);

/*
 * Before daemonising: send later messages to the log_use_file() file, or
 * else to syslog; where there is no syslog socket (containers), warn that
 * they will be lost.
 */
void log_detach(void);

/* Error messages logged so far (counted whatever the level), for stats. */
unsigned long long log_errors(void);

void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void log_vmsg(enum log_level level, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

/*
 * Format a message for the caller into @buf (@len bytes) and return @rc:
 * for functions that report an error to a caller who decides whether and
 * how to log it.
 */
int log_format(char *buf, size_t len, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
