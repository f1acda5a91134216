/* SPDX-License-Identifier: MIT */
/*
 * Line-at-a-time logger: format into a stack buffer, escape control
 * characters (so outside input cannot forge lines), emit with one write().
 */
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

/*
 * Copy msg into out (cap bytes, NUL-terminated), each control character
 * (below 0x20, and DEL) written as \xNN: names from SOURCE or a peer end up
 * in messages, and a newline in one must not start a forged log line.
 * Returns the length written.
 */
static size_t escape_controls(char *out, size_t cap, const char *msg)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)msg; *p && n + 1 < cap; p++) {
		if (*p >= 0x20 && *p != 0x7f) {
			out[n++] = (char)*p;
			continue;
		}
		if (n + 5 > cap)
			break;
		out[n++] = '\\';
		out[n++] = 'x';
		out[n++] = hex[*p >> 4];
		out[n++] = hex[*p & 15];
	}
	out[n] = '\0';
	return n;
}

static void log_vwrite(int level, const char *fmt, va_list ap)
{
	char msg[1024], line[1024];
	int saved = errno;

	if (vsnprintf(msg, sizeof(msg), fmt, ap) < 0)
		msg[0] = '\0';
	if (log_to_syslog) {
		escape_controls(line, sizeof(line), msg);
		syslog(level, "%s", line);
		errno = saved;
		return;
	}
	int n = snprintf(line, sizeof(line), "coordfs: %s: ", level_name(level));
	if (n < 0)
		n = 0;
	/* Room for the newline. */
	size_t len = (size_t)n + escape_controls(line + n, sizeof(line) - 1 - (size_t)n, msg);
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
