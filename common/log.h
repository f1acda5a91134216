/* SPDX-License-Identifier: MIT */
/*
 * Logging for every module: syslog levels, one write() per line, the level
 * checked before any argument is evaluated. Lines go to stderr in the
 * foreground and to syslog once the daemon has detached.
 */
#ifndef COORDFS_COMMON_LOG_H
#define COORDFS_COMMON_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <syslog.h>

/* Current threshold; messages above it are dropped. Set once at start-up. */
extern int log_threshold;

/* Send lines to syslog (true) or stderr (false). Not thread-safe: call it
 * before threads start. */
void log_use_syslog(bool on);
void log_set_level(int level);

void log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_msg(level, ...)                                                                        \
	do {                                                                                       \
		if ((level) <= log_threshold)                                                      \
			log_write((level), __VA_ARGS__);                                           \
	} while (0)

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
