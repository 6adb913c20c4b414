/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress.c - the terminal: a progress line, warnings and errors.
 *
 * While shards are written, a thread redraws one line on stderr twice a
 * second if stderr is a terminal: files and megabytes done, the rate so
 * far and the time left at that rate.  Every message, from any thread,
 * goes through pack_error() or pack_warn(), which take the same lock and
 * erase the line first, so messages and the line never garble each
 * other; the line comes back at the next redraw.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pack.h"
#include "shardfs/util.h"

/* Time between two redraws of the progress line. */
#define PROGRESS_INTERVAL_MS 500

/* The terminal, shared by every thread.  file-state: stderr is the
 * process's, and pack_error() and pack_warn() erase the line before
 * they write without a handle to reach it through. */
static struct {
	pthread_mutex_t lock;		/* serialises output to stderr */
	pthread_cond_t wake;		/* signalled when stop is asked for */
	pthread_t thread;		/* redraws the line */
	bool running;			/* thread was started */
	bool stopping;			/* thread should exit */
	bool shown;			/* a progress line is on screen */
	struct pack_progress *pr;	/* what the line shows */
	uint64_t start_ns;		/* when the display started (monotonic_ns()) */
} term = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.wake = PTHREAD_COND_INITIALIZER,
};

/* Erase the progress line, if it is shown; the lock is held. */
static void progress_erase(void)
{
	if (term.shown)
		fputs("\r\033[K", stderr);
	term.shown = false;
}

/* Draw the progress line; the lock is held. */
static void progress_draw(void)
{
	const struct pack_progress *pr = term.pr;
	uint64_t files = atomic_load(&pr->files);
	uint64_t bytes = atomic_load(&pr->bytes);
	double secs = seconds_since(term.start_ns), rate;
	char eta[32] = "-:--:--";

	rate = secs > 0 ? (double)bytes / secs : 0;
	if (rate > 0) {
		uint64_t left = (uint64_t)((double)(pr->total_bytes - bytes) /
					   rate);

		snprintf(eta, sizeof(eta), "%" PRIu64 ":%02u:%02u", left / 3600,
			 (unsigned)(left / 60 % 60), (unsigned)(left % 60));
	}
	fprintf(stderr, "\r%" PRIu64 "/%" PRIu64 " files  %.1f/%.1f MB  "
		"%.1f MB/s  ETA %s\033[K", files, pr->total_files,
		(double)bytes / 1e6, (double)pr->total_bytes / 1e6, rate / 1e6,
		eta);
	term.shown = true;
}

static void *progress_main(void *arg)
{
	pthread_mutex_lock(&term.lock);
	while (!term.stopping) {
		struct timespec deadline = deadline_after_ms(CLOCK_REALTIME,
							     PROGRESS_INTERVAL_MS);

		progress_draw();
		pthread_cond_timedwait(&term.wake, &term.lock, &deadline);
	}
	progress_erase();
	pthread_mutex_unlock(&term.lock);
	return arg;
}

int pack_progress_start(struct pack_progress *pr, bool enabled)
{
	int rc;

	term.pr = pr;
	term.start_ns = monotonic_ns();
	if (!enabled || !isatty(STDERR_FILENO))
		return 0;
	rc = pthread_create(&term.thread, NULL, progress_main, NULL);
	term.running = !rc;
	return -rc;
}

void pack_progress_stop(void)
{
	if (!term.running)
		return;
	pthread_mutex_lock(&term.lock);
	term.stopping = true;
	pthread_cond_signal(&term.wake);
	pthread_mutex_unlock(&term.lock);
	pthread_join(term.thread, NULL);
	term.running = false;
}

static void term_message(const char *prefix, const char *fmt, va_list ap)
{
	pthread_mutex_lock(&term.lock);
	progress_erase();
	fprintf(stderr, PACK_PROG ": %s", prefix);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	pthread_mutex_unlock(&term.lock);
}

void pack_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	term_message("", fmt, ap);
	va_end(ap);
}

void pack_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	term_message("warning: ", fmt, ap);
	va_end(ap);
}

int pack_errno(const char *path, const char *what)
{
	int err = errno;

	pack_error("%s: %s: %s", path, what, strerror(err));
	return -err;
}
