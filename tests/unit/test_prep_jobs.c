/* SPDX-License-Identifier: MIT */
/*
 * prep/jobs.c: the job identity of reading processes.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prep/prep_int.h"
#include "tests/unit/test_prep_images.h"

/* ---- job identity ---- */

/* A forked child that waits on fd for the parent to finish with it; with
 * mark, it first installs the handlers PyTorch's DataLoader workers do. */
static pid_t fork_child(int fd, bool mark)
{
	pid_t child = fork();

	if (child == 0) {
		char c;
		if (mark) {
			struct sigaction sa = { .sa_handler = SIG_DFL };
			sigemptyset(&sa.sa_mask);
			sa.sa_handler = (void (*)(int))abort;
			sigaction(SIGBUS, &sa, NULL);
			sigaction(SIGFPE, &sa, NULL);
			sigaction(SIGSEGV, &sa, NULL);
			sigaction(SIGTERM, &sa, NULL);
			if (write(fd, "r", 1) < 0) /* ready */
				_exit(2);
		}
		ssize_t n = read(fd, &c, 1); /* wait until the parent is done */
		_exit(n < 0);
	}
	return child;
}

/* A child exec'd with envp, once the exec is visible in /proc: its job name. */
static pid_t exec_child(char **envp, const char *want, char *job, size_t joblen)
{
	pid_t child = fork();

	if (child == 0) {
		char *argv[] = {"sleep", "5", NULL};
		execve("/bin/sleep", argv, envp);
		_exit(127);
	}
	for (int i = 0; i < 200; i++) { /* until the exec happened */
		if (prep_job_of_pid(child, job, joblen) == 0 && strcmp(job, want) == 0)
			break;
		usleep(10000);
	}
	return child;
}

START_TEST(job_identity)
{
	char me[PREP_JOB_NAME_MAX], child_job[PREP_JOB_NAME_MAX], prefix[64];
	int sv[2];
	char c;

	unsetenv("COORDFS_JOB");
	ck_assert_int_eq(prep_job_of_pid(getpid(), me, 3), -EINVAL);
	if (RUNNING_ON_VALGRIND) {
		/* valgrind catches every signal of the processes it runs, so
		 * each looks like a DataLoader worker: checked outside it */
		fprintf(stderr, "job_identity: the process-tree rule is not checked under valgrind\n");
		return;
	}
	ck_assert_int_eq(prep_job_of_pid(getpid(), me, sizeof(me)), 0);
	/* our own job: this process, whatever runs above us */
	snprintf(prefix, sizeof(prefix), "pid:%d:", (int)getpid());
	ck_assert_msg(strncmp(me, prefix, strlen(prefix)) == 0, "job %s", me);

	/* a forked child is a job of its own (a trial launched by a Python
	 * driver through multiprocessing)... */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid_t child = fork_child(sv[1], false);
	ck_assert_int_ge(child, 0);
	ck_assert_int_eq(prep_job_of_pid(child, child_job, sizeof(child_job)), 0);
	snprintf(prefix, sizeof(prefix), "pid:%d:", (int)child);
	ck_assert_msg(strncmp(child_job, prefix, strlen(prefix)) == 0, "child's job %s", child_job);
	ck_assert_int_eq(write(sv[0], "x", 1), 1);
	waitpid(child, NULL, 0);
	close(sv[0]);
	close(sv[1]);
	/* ...unless it carries a DataLoader worker's signal handlers: then it
	 * is in its parent's job. The parent is a "trainer" process with the
	 * default handlers (a sanitizer may have given this process some). */
	pid_t trainer = fork();
	ck_assert_int_ge(trainer, 0);
	if (trainer == 0) {
		char tj[PREP_JOB_NAME_MAX], wj[PREP_JOB_NAME_MAX];
		int ts[2], ok;
		const int sigs[] = { SIGBUS, SIGFPE, SIGSEGV, SIGTERM, SIGILL };

		for (unsigned i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			signal(sigs[i], SIG_DFL);
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, ts) != 0)
			_exit(3);
		pid_t worker = fork_child(ts[1], true);
		ok = worker > 0 && read(ts[0], &c, 1) == 1 &&
		     prep_job_of_pid(worker, wj, sizeof(wj)) == 0 &&
		     prep_job_of_pid(getpid(), tj, sizeof(tj)) == 0 && strcmp(wj, tj) == 0;
		if (!ok)
			fprintf(stderr, "job_identity: worker's job %s, trainer's %s\n", wj, tj);
		if (write(ts[0], "x", 1) != 1)
			ok = 0;
		waitpid(worker, NULL, 0);
		_exit(ok ? 0 : 1);
	}
	int tstatus = -1;
	waitpid(trainer, &tstatus, 0);
	ck_assert_msg(WIFEXITED(tstatus) && WEXITSTATUS(tstatus) == 0,
		      "a marked worker is not in its trainer's job");

	/* COORDFS_JOB wins, even in another executable */
	char *named[] = {"PATH=/usr/bin:/bin", "COORDFS_JOB=exp-42", "RANK=0", "WORLD_SIZE=2",
			 "MASTER_PORT=29500", NULL};
	child = exec_child(named, "exp-42", child_job, sizeof(child_job));
	ck_assert_str_eq(child_job, "exp-42");
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	/* a gone process */
	ck_assert_int_eq(prep_job_of_pid(child, child_job, sizeof(child_job)), -ESRCH);
	/* a rank of a distributed run: its run's rendezvous address */
	char *rank[] = {"PATH=/usr/bin:/bin", "RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
			"MASTER_PORT=29511", NULL};
	child = exec_child(rank, "ddp:127.0.0.1:29511", child_job, sizeof(child_job));
	ck_assert_str_eq(child_job, "ddp:127.0.0.1:29511");
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	/* MASTER_PORT alone (no RANK/WORLD_SIZE) names nothing */
	char *port_only[] = {"PATH=/usr/bin:/bin", "MASTER_PORT=29511", NULL};
	child = exec_child(port_only, "", child_job, sizeof(child_job));
	snprintf(prefix, sizeof(prefix), "pid:%d:", (int)child);
	ck_assert_msg(strncmp(child_job, prefix, strlen(prefix)) == 0, "job %s", child_job);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}
END_TEST

void prep_jobs_tests(TCase *tc)
{
	tcase_add_test(tc, job_identity);
}
