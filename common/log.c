/* SPDX-License-Identifier: MIT */
/* Line-at-a-time logger: format into a stack buffer, emit with one write(). */
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int log_threshold = LOG_NOTICE;
static bool log_to_syslog;

void log_use_syslog(bool on)
{
	if (on && !log_to_syslog)
		openlog("coordfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	log_to_syslog = on;
}

void log_set_level(int level)
{
	log_threshold = level;
}

static const char *level_name(int level)
{
	switch (level) {
	case LOG_EMERG:
	case LOG_ALERT:
	case LOG_CRIT:
	case LOG_ERR:
		return "error";
	case LOG_WARNING:
		return "warning";
	case LOG_NOTICE:
		return "notice";
	case LOG_INFO:
		return "info";
	default:
		return "debug";
	}
}

void log_vwrite(int level, const char *fmt, va_list ap)
{
	char line[1024];
	int saved = errno;

	if (log_to_syslog) {
		vsyslog(level, fmt, ap);
		errno = saved;
		return;
	}
	int n = snprintf(line, sizeof(line), "coordfs: %s: ", level_name(level));
	if (n < 0)
		n = 0;
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	size_t len = (size_t)n + (m > 0 ? (size_t)m : 0);
	if (len >= sizeof(line) - 1)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
	errno = saved;
}

void log_write(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(level, fmt, ap);
	va_end(ap);
}
