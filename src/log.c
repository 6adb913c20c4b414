/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c - leveled messages to stderr, a log file or syslog.
 *
 * A message is formatted into a stack buffer and written with one call, so
 * concurrent FUSE worker threads never interleave partial lines.  Messages
 * longer than the buffer are truncated rather than split.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "shardfs/log.h"
#include "shardfs/util.h"

/* The socket syslog(3) writes to; without it messages would be lost. */
#define LOG_SYSLOG_SOCKET "/dev/log"
/* Longest line written; longer messages are cut. */
#define LOG_LINE_MAX 4096

/*
 * file-state: the log is the process's, as its stderr and syslog are:
 * every module logs (log.h) without a handle to pass, libfuse's messages
 * come through a callback without one (cli.c), and the level and
 * destination are set once, before any thread starts.
 */
static enum log_level max_level = LOG_LEVEL_INFO;
static int to_syslog;
static int out_fd = STDERR_FILENO;	/* where lines go when not to syslog */
static int log_file = -1;		/* -o log=FILE, once opened */
static atomic_ullong errors_logged;	/* error lines, for .shardfs/stats */
static const char *program = "shardfs";	/* the prefix of every line */

void log_set_program(const char *name)
{
	program = name;
}

void log_set_level(enum log_level level)
{
	max_level = level;
}

int log_parse_level(const char *name, enum log_level *level)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	int i = name_table_find(names, ARRAY_SIZE(names), name);

	if (i < 0)
		return -EINVAL;
	*level = (enum log_level)i;
	return 0;
}

int log_format(char *buf, size_t len, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	return rc;
}

int log_use_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640), err;

	if (fd < 0) {
		err = errno;	/* logging may change errno */
		log_error("log=%s: %s", path, strerror(err));
		return -err;
	}
	log_file = fd;
	return 0;
}

void log_detach(void)
{
	struct stat st;

	if (log_file >= 0) {
		out_fd = log_file;
		return;
	}
	if (!stat(LOG_SYSLOG_SOCKET, &st) && S_ISSOCK(st.st_mode)) {
		openlog(program, LOG_PID, LOG_DAEMON);
		to_syslog = 1;
		return;
	}
	/* a note, not a warning: containers have no syslog as a rule, and
	 * -o quiet silences it */
	log_info("no syslog (%s is missing): messages after shardfs goes to the "
		 "background are lost; use -o log=FILE or -f", LOG_SYSLOG_SOCKET);
}

unsigned long long log_errors(void)
{
	return atomic_load_explicit(&errors_logged, memory_order_relaxed);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(level, fmt, ap);
	va_end(ap);
}

void log_vmsg(enum log_level level, const char *fmt, va_list ap)
{
	static const int priority[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
	static const char *const prefix[] = { "", "warning: ", "", "debug: " };
	char line[LOG_LINE_MAX];
	int n;

	if (level == LOG_LEVEL_ERROR)
		atomic_fetch_add_explicit(&errors_logged, 1, memory_order_relaxed);
	if (level > max_level)
		return;
	n = snprintf(line, sizeof(line), "%s: %s", program, prefix[level]);
	n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;
	if (line[n - 1] == '\n')	/* libfuse ends its lines */
		n--;
	if (to_syslog) {
		syslog(priority[level], "%s", line + strlen(program) + 2);
		return;
	}
	line[n++] = '\n';
	if (write(out_fd, line, n) < 0)
		return;
}
