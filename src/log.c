/*
 * log.c - leveled messages to stderr or syslog.
 *
 * A message is formatted into a stack buffer and written with one call, so
 * concurrent FUSE worker threads never interleave partial lines.  Messages
 * longer than the buffer are truncated rather than split.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "shardfs/log.h"

/* Longest line written; longer messages are cut. */
#define LOG_LINE_MAX 4096

static enum log_level max_level = LOG_LEVEL_INFO;
static int to_syslog;

void log_set_level(enum log_level level)
{
	max_level = level;
}

enum log_level log_get_level(void)
{
	return max_level;
}

int log_parse_level(const char *name, enum log_level *level)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcmp(name, names[i])) {
			*level = (enum log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

int log_format(char *buf, size_t len, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	return rc;
}

void log_use_syslog(void)
{
	openlog("shardfs", LOG_PID, LOG_DAEMON);
	to_syslog = 1;
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

	if (level > max_level)
		return;
	n = snprintf(line, sizeof(line), "shardfs: %s", prefix[level]);
	n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;
	if (line[n - 1] == '\n')	/* libfuse ends its lines */
		n--;
	if (to_syslog) {
		syslog(priority[level], "%s", line + strlen("shardfs: "));
		return;
	}
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0)
		return;
}
