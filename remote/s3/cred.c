/* SPDX-License-Identifier: MIT */
/*
 * The AWS credential chain of the S3 client, in the order the AWS tools
 * use: the environment, the shared credentials and config files for the
 * profile (static keys, else its credential_process), container
 * credentials (ECS/EKS), then the instance role through IMDSv2. Temporary
 * credentials (the last three, when they name an expiration) are
 * refreshed before they expire: one caller fetches new ones while the
 * others go on with the old ones as long as those are still valid.
 *
 * credential_process runs the profile's command line, split into words
 * (remote__s3_split_command: quotes and backslashes as a shell has them,
 * but nothing expanded, no $VAR, ~ or globs), without a shell, with no descriptor of ours but stdin, stdout and stderr; its
 * standard output (at most 64 KiB, within 60 s) is the JSON document the
 * AWS tools define (Version 1). stderr is passed through.
 *
 * Lock order: refresh_lock (held across the fetch) before lock (held only
 * to copy the current credentials). Secrets never reach a log line or an
 * error text; only their source does.
 */
#include "remote/s3/s3_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/deadline.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "common/text.h"
#include "remote/http.h"

extern char **environ;

#define IMDS_DEFAULT "http://169.254.169.254"
#define CONTAINER_HOST "http://169.254.170.2"
#define CRED_CONNECT_TIMEOUT_MS 1000
#define CRED_TIMEOUT_MS 3000
#define CRED_RETRY_S 10 /* after a failed refresh, while the old ones last */
#define S3_MAX_IMDS_TOKEN 1024
#define PROCESS_TIMEOUT_MS 60000
#define PROCESS_MAX_OUTPUT (64 * 1024)

struct s3_cred {
	enum s3_cred_source source;
	struct remote_http *pool;
	char *url;	 /* container URI, or the IMDS base */
	char *auth;	 /* container Authorization value (a secret) */
	char *auth_file; /* ... or the file that holds it */
	char *process;	 /* credential_process command line */
	pthread_mutex_t refresh_lock;
	pthread_mutex_t lock; /* protects cur and refresh_at_s */
	struct s3_creds cur;
	int64_t refresh_at_s; /* 0: never */
	_Atomic unsigned fetches;
};

static int64_t now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec;
}

/* ---- files ------------------------------------------------------------ */

/* Read a whole small file into a NUL-terminated buffer; *info (NULL ok):
 * its attributes, from the descriptor read. -ENOENT when it does not
 * exist, -EINVAL when it is not a regular file, -EFBIG over the cap. */
static int read_small_file(const char *path, char **out, size_t *len, struct stat *info)
{
	/* O_NONBLOCK: a FIFO at path must not hold the mount in open. */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	struct stat st;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	if ((uint64_t)st.st_size > S3_MAX_INI_FILE) {
		close(fd);
		return -EFBIG;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	size_t got = 0;

	if (info)
		*info = st;
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	*out = buf;
	*len = got;
	return 0;
}

static int home_path(const char *rel, char *out, size_t cap)
{
	const char *home = getenv("HOME");
	struct passwd pw, *res = NULL;
	char pwbuf[4096];

	if (!home || !*home) {
		if (getpwuid_r(getuid(), &pw, pwbuf, sizeof(pwbuf), &res) || !res)
			return -ENOENT;
		home = res->pw_dir;
	}
	return snprintf(out, cap, "%s/%s", home, rel) < (int)cap ? 0 : -ENAMETOOLONG;
}

/* Warned about a shared credentials file others can read (once a process). */
static atomic_bool warned_open_file;

/* Why the INI file read with attributes st may not be used, or NULL. Its
 * credential_process is run by the daemon, often root: a file (or a HOME
 * such as sudo -E keeps) that another user owns, or that others may write,
 * would have it run their command and use their keys, as ssh(1) refuses
 * such a config. */
static const char *ini_foreign(const struct stat *st)
{
	if (st->st_uid != geteuid() && st->st_uid != 0)
		return "belongs to another user";
	if (st->st_mode & 022)
		return "others may write it";
	return NULL;
}

/* Merge `section` of the INI file at path into p. A missing file is fine.
 * holds_keys: the shared credentials file, which others must not read. */
static int load_ini(const char *path, const char *section, struct s3_profile *p,
		    bool holds_keys, char *err, size_t errlen)
{
	char *text = NULL;
	size_t len = 0;
	struct stat st;
	int r = read_small_file(path, &text, &len, &st);

	if (r == -ENOENT)
		return 0;
	if (r) {
		remote__s3_set_err(err, errlen, "%s: cannot read: %s", path,
				   r == -EINVAL ? "not a regular file" : strerror(-r));
		return -EINVAL;
	}
	const char *why = ini_foreign(&st);
	mode_t mode = st.st_mode & 07777;

	if (why) {
		remote__s3_set_err(err, errlen, "%s: %s (uid %u, mode %04o): not used", path, why,
				   (unsigned)st.st_uid, (unsigned)mode);
		explicit_bzero(text, len);
		free(text);
		return -EINVAL;
	}
	/* As ssh does for private keys, but a warning: the keys are used. */
	if (holds_keys && (mode & 077) && !atomic_exchange(&warned_open_file, true))
		log_warn("%s is readable by %s (mode %04o): whoever can read it has these "
			 "keys; chmod 600 it",
			 path, (mode & 070) && (mode & 07) ? "group and others"
			       : (mode & 070)		 ? "its group"
							 : "others",
			 (unsigned)mode);
	r = remote__s3_ini_parse(text, len, section, p);
	/* the text holds secrets: wipe before freeing */
	explicit_bzero(text, len);
	free(text);
	if (r)
		remote__s3_set_err(err, errlen, "%s: malformed (a line or value is too long)", path);
	return r;
}

/* ---- credential endpoints --------------------------------------------- */

static size_t body_cb(char *data, size_t size, size_t n, void *arg)
{
	struct strbuf *sb = arg;

	if (sb->len + size * n > S3_MAX_CRED_BODY)
		return 0;
	strbuf_append(sb, data, size * n);
	return sb->failed ? 0 : size * n;
}

/* One request to a credential endpoint; 0 and a 2xx body, or -EIO. */
static int cred_http(struct remote_http *pool, const char *method, const char *url,
		     struct curl_slist *hdrs, struct strbuf *body, char *err, size_t errlen)
{
	/* Its own handle: a refresh runs while the caller may hold a pooled
	 * one, and it is rare enough to pay for a new connection. */
	CURL *e = remote_http_new(pool);
	long status = 0;
	char ebuf[CURL_ERROR_SIZE] = "";

	if (!e)
		return -ENOMEM;
	strbuf_reset(body);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
	if (!strcmp(method, "PUT")) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, 0L);
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)CRED_CONNECT_TIMEOUT_MS);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)CRED_TIMEOUT_MS);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, body_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, body);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, ebuf);
	CURLcode rc = curl_easy_perform(e);

	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(e);
	if (rc != CURLE_OK) {
		remote__s3_set_err(err, errlen, "%s: %s", url, ebuf[0] ? ebuf : curl_easy_strerror(rc));
		return -EIO;
	}
	if (status < 200 || status > 299) {
		remote__s3_set_err(err, errlen, "%s: HTTP %ld", url, status);
		return -EIO;
	}
	return 0;
}

/* GET the credentials document at url into body and read it into out:
 * 0, or -errno with err set. */
static int fetch_document(struct s3_cred *c, const char *url, struct curl_slist *hdrs,
			  struct strbuf *body, struct s3_creds *out, char *err, size_t errlen)
{
	int r = cred_http(c->pool, "GET", url, hdrs, body, err, errlen);

	if (r)
		return r;
	atomic_fetch_add(&c->fetches, 1);
	if (remote__s3_cred_json(body->buf, body->len, out)) {
		remote__s3_set_err(err, errlen, "%s: not a credentials document", url);
		return -EIO;
	}
	return 0;
}

static int fetch_container(struct s3_cred *c, struct s3_creds *out, char *err, size_t errlen)
{
	struct curl_slist *hdrs = NULL;
	struct strbuf body, auth;
	int r;

	strbuf_init(&body);
	strbuf_init(&auth);
	if (c->auth_file) {
		char *text = NULL;
		size_t len = 0;

		r = read_small_file(c->auth_file, &text, &len, NULL);
		if (r) {
			remote__s3_set_err(err, errlen, "%s: cannot read the authorization token",
				c->auth_file);
			r = -EACCES;
			goto out;
		}
		while (len && (text[len - 1] == '\n' || text[len - 1] == '\r'))
			len--;
		/* a line break would start a header of the file's choosing */
		if (memchr(text, '\r', len) || memchr(text, '\n', len) || memchr(text, '\0', len)) {
			explicit_bzero(text, len);
			free(text);
			remote__s3_set_err(err, errlen, "%s: the authorization token holds a line break",
				c->auth_file);
			r = -EACCES;
			goto out;
		}
		strbuf_puts(&auth, "Authorization: ");
		strbuf_append(&auth, text, len);
		explicit_bzero(text, len);
		free(text);
	} else if (c->auth) {
		strbuf_printf(&auth, "Authorization: %s", c->auth);
	}
	if (auth.len && !(hdrs = curl_slist_append(NULL, auth.buf))) {
		r = -ENOMEM;
		goto out;
	}
	r = fetch_document(c, c->url, hdrs, &body, out, err, errlen);
out:
	curl_slist_free_all(hdrs);
	strbuf_fini_wipe(&auth);
	strbuf_fini_wipe(&body);
	return r;
}

static int fetch_imds(struct s3_cred *c, struct s3_creds *out, char *err, size_t errlen)
{
	struct curl_slist *hdrs = NULL;
	struct strbuf body, url, tokhdr;
	int r;

	strbuf_init(&body);
	strbuf_init(&url);
	strbuf_init(&tokhdr);
	hdrs = curl_slist_append(NULL, "X-aws-ec2-metadata-token-ttl-seconds: 21600");
	if (!hdrs) {
		r = -ENOMEM;
		goto out;
	}
	strbuf_printf(&url, "%s/latest/api/token", c->url);
	r = cred_http(c->pool, "PUT", url.buf, hdrs, &body, err, errlen);
	curl_slist_free_all(hdrs);
	hdrs = NULL;
	if (r)
		goto out;
	if (body.len == 0 || body.len > S3_MAX_IMDS_TOKEN || memchr(body.buf, '\n', body.len) ||
	    memchr(body.buf, '\r', body.len)) {
		remote__s3_set_err(err, errlen, "%s: bad IMDSv2 token", url.buf);
		r = -EIO;
		goto out;
	}
	strbuf_puts(&tokhdr, "X-aws-ec2-metadata-token: ");
	strbuf_append(&tokhdr, body.buf, body.len);
	hdrs = curl_slist_append(NULL, tokhdr.buf);
	if (!hdrs) {
		r = -ENOMEM;
		goto out;
	}
	strbuf_reset(&url);
	strbuf_printf(&url, "%s/latest/meta-data/iam/security-credentials/", c->url);
	r = cred_http(c->pool, "GET", url.buf, hdrs, &body, err, errlen);
	if (r)
		goto out;
	/* The first line is the role name. */
	size_t n = 0;

	while (n < body.len && body.buf[n] != '\n' && body.buf[n] != '\r')
		n++;
	if (n == 0 || n > 128) {
		remote__s3_set_err(err, errlen, "%s: no instance role", url.buf);
		r = -EIO;
		goto out;
	}
	strbuf_append(&url, body.buf, n);
	r = fetch_document(c, url.buf, hdrs, &body, out, err, errlen);
out:
	curl_slist_free_all(hdrs);
	strbuf_fini_wipe(&body);
	strbuf_fini(&url);
	strbuf_fini_wipe(&tokhdr);
	return r;
}

/* Read fd to EOF into body (at most PROCESS_MAX_OUTPUT bytes) until
 * deadline_ms (CLOCK_MONOTONIC). 0, -EFBIG, -ETIMEDOUT or -errno. */
static int read_output(int fd, struct strbuf *body, int64_t deadline_ms)
{
	char buf[4096];

	for (;;) {
		int64_t left = deadline_ms - deadline_now_ms();
		struct pollfd pfd = {.fd = fd, .events = POLLIN};

		if (left <= 0)
			return -ETIMEDOUT;
		int n = poll(&pfd, 1, (int)(left > 1000 ? 1000 : left));

		if (n < 0 && errno != EINTR)
			return -errno;
		if (n <= 0)
			continue;
		ssize_t got = read(fd, buf, sizeof(buf));

		if (got < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (got == 0)
			return 0;
		if (body->len + (size_t)got > PROCESS_MAX_OUTPUT)
			return -EFBIG;
		strbuf_append(body, buf, (size_t)got);
	}
}

/* Reap pid, waiting until deadline_ms at most (a child that closed its
 * stdout may still run): then it is killed. A pidfd makes the wait a
 * poll; without one (kernels before 5.3) waitpid is polled. 0, or
 * -ETIMEDOUT when the child had to be killed. */
static int reap_child(pid_t pid, int *status, int64_t deadline_ms)
{
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	bool exited = false;
	int r = 0;

	for (;;) {
		int64_t left = deadline_ms - deadline_now_ms();
		if (left <= 0)
			break;
		if (pfd >= 0) {
			struct pollfd p = {.fd = pfd, .events = POLLIN};
			int n = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
			if (n > 0) {
				exited = true;
				break;
			}
			if (n < 0 && errno != EINTR)
				break;
		} else {
			pid_t w = waitpid(pid, status, WNOHANG);
			if (w == pid)
				return 0;
			if (w < 0 && errno != EINTR)
				return -errno;
			struct timespec ts = {0, 10 * 1000000L};
			nanosleep(&ts, NULL);
		}
	}
	if (!exited) {
		kill(pid, SIGKILL);
		r = -ETIMEDOUT;
	}
	if (pfd >= 0)
		close(pfd);
	while (waitpid(pid, status, 0) < 0 && errno == EINTR)
		;
	return r;
}

static int fetch_process(struct s3_cred *c, struct s3_creds *out, char *err, size_t errlen)
{
	posix_spawn_file_actions_t fa;
	struct strbuf body;
	int pipefd[2] = {-1, -1}, r, status = 0;
	pid_t pid = -1;
	char **argv;
	size_t argc;
	const char *why;

	/* wordexp(3) would expand $VARS, ~ and globs, and is not thread-safe */
	r = remote__s3_split_command(c->process, &argv, &argc, &why);
	if (r) {
		remote__s3_set_err(err, errlen, "credential_process: cannot split the command "
			"line (%s)", r == -ENOMEM ? "out of memory" : why);
		return r == -ENOMEM ? r : -EINVAL;
	}
	strbuf_init(&body);
	if (pipe2(pipefd, O_CLOEXEC)) {
		r = -errno;
		remote__s3_set_err(err, errlen, "credential_process: pipe: %s", strerror(-r));
		goto out;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDOUT_FILENO);
	/* none of the daemon's descriptors (FUSE, sockets, SOURCE) */
	posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
	r = -posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pipefd[1]);
	pipefd[1] = -1;
	if (r) {
		pid = -1;
		remote__s3_set_err(err, errlen, "credential_process: cannot run %s: %s",
			argv[0], strerror(-r));
		goto out;
	}
	int64_t deadline = deadline_now_ms() + PROCESS_TIMEOUT_MS;

	r = read_output(pipefd[0], &body, deadline);
	/* On any error the child is killed and its pipe closed before the
	 * wait: one blocked writing into a full pipe (over 64 KiB of output)
	 * would otherwise never exit, and a refresh holds refresh_lock (every
	 * request and unmount waiting behind it). The wait itself is bounded. */
	if (r)
		kill(pid, SIGKILL);
	close(pipefd[0]);
	pipefd[0] = -1;
	int rr = reap_child(pid, &status, r ? deadline_now_ms() + 5000 : deadline);
	if (!r && rr == -ETIMEDOUT)
		r = -ETIMEDOUT; /* closed its stdout, then never exited */
	if (r) {
		remote__s3_set_err(err, errlen, "credential_process %s: %s", argv[0],
			r == -ETIMEDOUT ? "no answer within 60 s (killed)" :
			r == -EFBIG ? "more than 64 KiB of output" : strerror(-r));
		r = r == -ETIMEDOUT ? -ETIMEDOUT : -EIO;
		goto out;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		remote__s3_set_err(err, errlen, "credential_process %s: %s %d", argv[0],
			WIFEXITED(status) ? "exited with status" : "killed by signal",
			WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		r = -EIO;
		goto out;
	}
	atomic_fetch_add(&c->fetches, 1);
	if (remote__s3_cred_json(body.buf ? body.buf : "", body.len, out)) {
		remote__s3_set_err(err, errlen, "credential_process %s: its output is not a "
			"credentials document (JSON with Version 1, AccessKeyId, SecretAccessKey)",
			argv[0]);
		r = -EIO;
	}
out:
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	strbuf_fini_wipe(&body);
	remote__s3_argv_free(argv);
	return r;
}

static int fetch(struct s3_cred *c, struct s3_creds *out, char *err, size_t errlen)
{
	int64_t now = now_s();
	int r;

	if (c->source == S3_CRED_PROCESS)
		r = fetch_process(c, out, err, errlen);
	else if (c->source == S3_CRED_CONTAINER)
		r = fetch_container(c, out, err, errlen);
	else
		r = fetch_imds(c, out, err, errlen);
	/* Expired on arrival: said as such, not as the server's refusal of
	 * every request that would follow. */
	if (r == 0 && out->expires_s && out->expires_s <= now) {
		remote__s3_set_err(err, errlen, "%s%sthe credentials it gave expired %lld s ago "
				   "(their Expiration is past: check it, and this machine's clock)",
				   c->source == S3_CRED_PROCESS ? "credential_process" :
				   c->source == S3_CRED_IMDS ? c->url : "",
				   c->source == S3_CRED_CONTAINER ? "" : ": ",
				   (long long)(now - out->expires_s));
		explicit_bzero(out, sizeof(*out));
		r = -EIO;
	}
	return r;
}

/* Install fresh credentials: under lock, with their refresh time. */
static void install(struct s3_cred *c, const struct s3_creds *fresh)
{
	int64_t now = now_s();

	pthread_mutex_lock(&c->lock);
	c->cur = *fresh;
	c->refresh_at_s = fresh->expires_s ? remote__s3_refresh_at(now, fresh->expires_s) : 0;
	pthread_mutex_unlock(&c->lock);
}

/* ---- the chain -------------------------------------------------------- */

/* The first fetch from c's source, installed: 0, or -EACCES with one line
 * (what, then the cause) in err. */
static int first_fetch(struct s3_cred *c, const char *what, char *err, size_t errlen)
{
	struct s3_creds first;
	char ferr[512] = "";

	if (fetch(c, &first, ferr, sizeof(ferr))) {
		remote__s3_set_err(err, errlen, "%s%s", what, ferr);
		return -EACCES;
	}
	install(c, &first);
	explicit_bzero(&first, sizeof(first));
	return 0;
}

static int from_profile(const struct remote_s3_config *cfg, struct s3_profile *p, char *err,
			size_t errlen)
{
	const char *name = cfg->profile && *cfg->profile ? cfg->profile : text_env("AWS_PROFILE");
	bool explicit_name = name != NULL;
	char cred_path[4096], conf_path[4096], section[256];
	const char *v;
	int r;

	if (!name)
		name = "default";
	if ((v = text_env("AWS_SHARED_CREDENTIALS_FILE")))
		snprintf(cred_path, sizeof(cred_path), "%s", v);
	else if (home_path(".aws/credentials", cred_path, sizeof(cred_path)))
		cred_path[0] = '\0';
	if ((v = text_env("AWS_CONFIG_FILE")))
		snprintf(conf_path, sizeof(conf_path), "%s", v);
	else if (home_path(".aws/config", conf_path, sizeof(conf_path)))
		conf_path[0] = '\0';

	/* config first, so the credentials file's values win */
	if (conf_path[0]) {
		if (!strcmp(name, "default") &&
		    (r = load_ini(conf_path, "default", p, false, err, errlen)))
			return r;
		snprintf(section, sizeof(section), "profile %s", name);
		if ((r = load_ini(conf_path, section, p, false, err, errlen)))
			return r;
	}
	if (cred_path[0] && (r = load_ini(cred_path, name, p, true, err, errlen)))
		return r;
	if (explicit_name && !p->found) {
		remote__s3_set_err(err, errlen, "profile %s: not found in %s or %s", name,
			cred_path[0] ? cred_path : "~/.aws/credentials",
			conf_path[0] ? conf_path : "~/.aws/config");
		return -EINVAL;
	}
	return 0;
}

int remote__s3_cred_create(const struct remote_s3_config *cfg, struct remote_http *pool,
			   char *region_out, size_t region_cap, struct s3_cred **out, char *err,
			   size_t errlen)
{
	struct s3_cred *c = calloc(1, sizeof(*c));
	struct s3_profile *prof = calloc(1, sizeof(*prof));
	const char *ak = text_env("AWS_ACCESS_KEY_ID"), *sk = text_env("AWS_SECRET_ACCESS_KEY");
	const char *v;
	int r;

	if (!c || !prof) {
		free(c);
		free(prof);
		return -ENOMEM;
	}
	c->pool = pool;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->refresh_lock, NULL);

	/* The profile is read even when another source wins: its region counts. */
	r = from_profile(cfg, prof, err, errlen);
	if (r)
		goto fail;
	if (prof->region[0] && region_out && strlen(prof->region) < region_cap)
		strcpy(region_out, prof->region);

	if (cfg->no_sign) {
		c->source = S3_CRED_NONE;
		goto done;
	}
	if (ak || sk) {
		if (!ak || !sk) {
			remote__s3_set_err(err, errlen, "%s is set but %s is not",
				ak ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
				ak ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
			r = -EINVAL;
			goto fail;
		}
		if (remote__s3_copy_str(c->cur.access_key, sizeof(c->cur.access_key), ak) ||
		    remote__s3_copy_str(c->cur.secret_key, sizeof(c->cur.secret_key), sk) ||
		    ((v = text_env("AWS_SESSION_TOKEN")) &&
		     remote__s3_copy_str(c->cur.token, sizeof(c->cur.token), v))) {
			remote__s3_set_err(err, errlen,
				"AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/"
				"AWS_SESSION_TOKEN: too long");
			r = -EINVAL;
			goto fail;
		}
		c->source = S3_CRED_ENV;
		goto done;
	}
	if (prof->access_key[0] && prof->secret_key[0]) {
		strcpy(c->cur.access_key, prof->access_key);
		strcpy(c->cur.secret_key, prof->secret_key);
		strcpy(c->cur.token, prof->token);
		c->source = S3_CRED_PROFILE;
		goto done;
	}

	struct s3_creds first;
	char ferr[512] = "";

	if (prof->process[0]) {
		c->source = S3_CRED_PROCESS;
		c->process = strdup(prof->process);
		if (!c->process) {
			r = -ENOMEM;
			goto fail;
		}
		if ((r = first_fetch(c, "", err, errlen)))
			goto fail;
		goto done;
	}

	if ((v = text_env("AWS_CONTAINER_CREDENTIALS_FULL_URI")) ||
	    text_env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) {
		c->source = S3_CRED_CONTAINER;
		if (v) {
			c->url = strdup(v);
		} else if (asprintf(&c->url, "%s%s", CONTAINER_HOST,
				    text_env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) < 0) {
			c->url = NULL;
		}
		if ((v = text_env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")))
			c->auth_file = strdup(v);
		else if ((v = text_env("AWS_CONTAINER_AUTHORIZATION_TOKEN")))
			c->auth = strdup(v);
		if (!c->url || (v && !c->auth && !c->auth_file)) {
			r = -ENOMEM;
			goto fail;
		}
		/* As the AWS SDKs: credentials go only to this machine, the
		 * ECS/EKS agents, or over https. */
		if (!remote__s3_container_uri_ok(c->url)) {
			remote__s3_set_err(err, errlen,
				"container credentials: AWS_CONTAINER_CREDENTIALS_FULL_URI must be "
				"https, or http to a loopback address, 169.254.170.2 or "
				"169.254.170.23");
			r = -EACCES;
			goto fail;
		}
		if (c->auth && strpbrk(c->auth, "\r\n")) {
			remote__s3_set_err(err, errlen,
				"container credentials: AWS_CONTAINER_AUTHORIZATION_TOKEN holds a "
				"line break");
			r = -EACCES;
			goto fail;
		}
		if ((r = first_fetch(c, "container credentials: ", err, errlen)))
			goto fail;
		goto done;
	}
	v = text_env("AWS_EC2_METADATA_DISABLED");
	if (!v || strcasecmp(v, "true")) {
		c->source = S3_CRED_IMDS;
		v = text_env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
		c->url = strdup(v ? v : IMDS_DEFAULT);
		if (!c->url) {
			r = -ENOMEM;
			goto fail;
		}
		size_t n = strlen(c->url);

		while (n && c->url[n - 1] == '/')
			c->url[--n] = '\0';
		r = fetch(c, &first, ferr, sizeof(ferr));
		if (r == 0) {
			install(c, &first);
			explicit_bzero(&first, sizeof(first));
			goto done;
		}
		log_debug("s3: no instance-role credentials: %s", ferr);
	}
	remote__s3_set_err(err, errlen,
		"no S3 credentials found (environment, shared files, container, instance "
		"role%s): set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile, or use "
		"--no-sign-request for a public bucket",
		ferr[0] ? "" : " disabled");
	r = -EACCES;
	goto fail;

done:
	explicit_bzero(prof, sizeof(*prof));
	free(prof);
	*out = c;
	return 0;
fail:
	explicit_bzero(prof, sizeof(*prof));
	free(prof);
	remote__s3_cred_destroy(c);
	return r;
}

void remote__s3_cred_destroy(struct s3_cred *c)
{
	if (!c)
		return;
	explicit_bzero(&c->cur, sizeof(c->cur));
	if (c->auth) {
		explicit_bzero(c->auth, strlen(c->auth));
		free(c->auth);
	}
	free(c->auth_file);
	free(c->process);
	free(c->url);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->refresh_lock);
	free(c);
}

/* Called with refresh_lock held. */
static void refresh(struct s3_cred *c)
{
	struct s3_creds fresh;
	char ferr[512] = "";

	if (fetch(c, &fresh, ferr, sizeof(ferr)) == 0) {
		install(c, &fresh);
		explicit_bzero(&fresh, sizeof(fresh));
		log_debug("s3: credentials refreshed");
		return;
	}
	log_warn("s3: refreshing credentials failed: %s", ferr);
	pthread_mutex_lock(&c->lock);
	c->refresh_at_s = now_s() + CRED_RETRY_S;
	pthread_mutex_unlock(&c->lock);
}

/* Copy the current credentials if valid; true when they are. */
static bool copy_valid(struct s3_cred *c, struct s3_creds *out, bool *due)
{
	int64_t now = now_s();
	bool valid;

	pthread_mutex_lock(&c->lock);
	valid = c->cur.expires_s == 0 || now < c->cur.expires_s;
	/* expired is due too, even inside a failed refresh's pause */
	*due = c->refresh_at_s && (now >= c->refresh_at_s || !valid);
	if (valid)
		*out = c->cur;
	pthread_mutex_unlock(&c->lock);
	return valid;
}

int remote__s3_cred_get(struct s3_cred *c, struct s3_creds *out)
{
	bool due;

	if (copy_valid(c, out, &due) && !due)
		return 0;
	if (!due)
		return -EACCES; /* invalid yet nothing to refresh: cannot happen */
	if (pthread_mutex_trylock(&c->refresh_lock) == 0) {
		if (copy_valid(c, out, &due), due)
			refresh(c);
		pthread_mutex_unlock(&c->refresh_lock);
	} else if (!copy_valid(c, out, &due)) {
		/* expired: wait for the refresher */
		pthread_mutex_lock(&c->refresh_lock);
		pthread_mutex_unlock(&c->refresh_lock);
	} else {
		return 0; /* someone refreshes; the old ones are still good */
	}
	return copy_valid(c, out, &due) ? 0 : -EACCES;
}

bool remote__s3_cred_expire(struct s3_cred *c)
{
	bool can;

	if (!c)
		return false;
	pthread_mutex_lock(&c->lock);
	can = c->refresh_at_s != 0; /* 0: static, nothing to refresh */
	if (can)
		c->refresh_at_s = now_s();
	pthread_mutex_unlock(&c->lock);
	return can;
}

enum s3_cred_source remote__s3_cred_source(const struct s3_cred *c)
{
	return c ? c->source : S3_CRED_NONE;
}

unsigned remote__s3_cred_fetches(const struct s3_cred *c)
{
	return c ? atomic_load(&c->fetches) : 0;
}
