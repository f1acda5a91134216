/* SPDX-License-Identifier: MIT */
/*
 * prep/ahead.c: decode-ahead, low-priority threads that decode the
 * samples an active job will open next in its current pass, on CPU time
 * the loaders leave idle (cfg.ahead_threads, cfg.ahead_idle).
 */
#ifndef COORDFS_PREP_AHEAD_H
#define COORDFS_PREP_AHEAD_H

#define AHEAD_IDLE_MIN 0.5 /* cores idle, at least, for decoding ahead (default) */

/* A decode-ahead thread (pthread_create with the view): runs until
 * view->stop. */
void *prep__ahead_main(void *arg);

#endif
