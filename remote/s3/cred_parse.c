/* SPDX-License-Identifier: MIT */
/*
 * What the credential chain (cred.c) reads, parsed without I/O: a
 * credential_process command line (split without a shell), the container
 * credentials endpoint's rules, the INI of the shared credentials and
 * config files, and credential JSON (jansson).
 */
#include "remote/s3/s3_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <expat.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/hex.h"
#include "common/strbuf.h"
#include "common/text.h"

/* ---- credential_process command line ------------------------------------ */

void remote__s3_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **a = argv; *a; a++)
		free(*a);
	free(argv);
}

int remote__s3_split_command(const char *line, char ***argv, size_t *argc, const char **why)
{
	size_t len = strlen(line), n = 0;
	/* at most len/2 + 1 words, each at most len bytes */
	char **v = calloc(len / 2 + 2, sizeof(*v));
	char *word = malloc(len + 1);
	const char *p = line;
	int r = 0;

	*why = NULL;
	if (!v || !word) {
		r = -ENOMEM;
		goto out;
	}
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			break;
		size_t w = 0;
		while (*p && *p != ' ' && *p != '\t') {
			char ch = *p++;
			if (ch == '\'') {
				const char *end = strchr(p, '\'');
				if (!end) {
					*why = "unbalanced quotes";
					r = -EINVAL;
					goto out;
				}
				memcpy(word + w, p, (size_t)(end - p));
				w += (size_t)(end - p);
				p = end + 1;
			} else if (ch == '"') {
				while (*p && *p != '"') {
					if (*p == '\\' && p[1] && strchr("\"\\$`", p[1]))
						p++;
					word[w++] = *p++;
				}
				if (*p != '"') {
					*why = "unbalanced quotes";
					r = -EINVAL;
					goto out;
				}
				p++;
			} else if (ch == '\\') {
				if (*p)
					word[w++] = *p++;
			} else if (ch == '`' || (ch == '$' && *p == '(')) {
				*why = "command substitution is not allowed";
				r = -EINVAL;
				goto out;
			} else if (strchr("|&;<>(){}\n", ch)) {
				*why = "unquoted | & ; < > ( ) { } or newline";
				r = -EINVAL;
				goto out;
			} else {
				word[w++] = ch;
			}
		}
		v[n] = strndup(word, w);
		if (!v[n]) {
			r = -ENOMEM;
			goto out;
		}
		n++;
	}
	if (n == 0) {
		*why = "empty command";
		r = -EINVAL;
	}
out:
	free(word);
	if (r) {
		remote__s3_argv_free(v);
		return r;
	}
	*argv = v;
	*argc = n;
	return 0;
}

/* ---- container credentials endpoint ------------------------------------ */

bool remote__s3_container_uri_ok(const char *url)
{
	static const char *const allowed[] = {"169.254.170.2", "169.254.170.23", "[fd00:ec2::23]",
					      "[::1]", "localhost"};
	const char *h;
	char host[64];

	if (!strncasecmp(url, "https://", 8))
		h = url + 8;
	else if (!strncasecmp(url, "http://", 7))
		h = url + 7;
	else
		return false;
	size_t n = strcspn(h, "/?#");
	if (memchr(h, '@', n))
		return false; /* user info: not a host we can vouch for */
	if (h == url + 8)
		return n > 0;
	/* the host without its port ([v6]:port, v4:port, name:port) */
	size_t hn;
	if (h[0] == '[') {
		const char *close = memchr(h, ']', n);
		hn = close ? (size_t)(close - h) + 1 : 0;
	} else {
		hn = strcspn(h, ":/?#");
	}
	if (hn == 0 || hn >= sizeof(host) || (hn < n && h[hn] != ':'))
		return false;
	memcpy(host, h, hn);
	host[hn] = '\0';
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
		if (!strcasecmp(host, allowed[i]))
			return true;
	/* 127.0.0.0/8, as a dotted quad and nothing else */
	unsigned a, b, c, d;
	char tail;
	return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 && b < 256 &&
	       c < 256 && d < 256;
}

/* ---- INI -------------------------------------------------------------- */

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	char *e = s + strlen(s);

	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

int remote__s3_copy_str(char *dst, size_t cap, const char *v)
{
	size_t n = strlen(v);

	if (n >= cap)
		return -EINVAL;
	memcpy(dst, v, n + 1);
	return 0;
}

int remote__s3_ini_parse(const char *text, size_t len, const char *section, struct s3_profile *p)
{
	char line[S3_MAX_INI_LINE + 1];
	bool in_section = false;
	size_t pos = 0;

	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;

		if (n > S3_MAX_INI_LINE)
			return -EINVAL;
		memcpy(line, text + pos, n);
		line[n] = '\0';
		pos += n + (nl ? 1 : 0);
		if (memchr(line, '\0', n))
			return -EINVAL;

		char *l = trim(line);

		if (*l == '\0' || *l == '#' || *l == ';')
			continue;
		if (*l == '[') {
			char *e = strchr(l, ']');

			if (!e)
				return -EINVAL;
			*e = '\0';
			in_section = !strcmp(trim(l + 1), section);
			if (in_section)
				p->found = true;
			continue;
		}
		if (!in_section)
			continue;
		char *eq = strchr(l, '=');

		if (!eq)
			continue; /* a nested-value line or junk: not ours */
		*eq = '\0';
		char *k = trim(l), *v = trim(eq + 1);
		int r = 0;

		if (!strcasecmp(k, "aws_access_key_id"))
			r = remote__s3_copy_str(p->access_key, sizeof(p->access_key), v);
		else if (!strcasecmp(k, "aws_secret_access_key"))
			r = remote__s3_copy_str(p->secret_key, sizeof(p->secret_key), v);
		else if (!strcasecmp(k, "aws_session_token"))
			r = remote__s3_copy_str(p->token, sizeof(p->token), v);
		else if (!strcasecmp(k, "region"))
			r = remote__s3_copy_str(p->region, sizeof(p->region), v);
		else if (!strcasecmp(k, "credential_process"))
			r = remote__s3_copy_str(p->process, sizeof(p->process), v);
		if (r)
			return r;
	}
	return 0;
}

/* ---- credential JSON -------------------------------------------------- */

/* A string field of a credential document, copied to dst. No field of a
 * real one holds a control character, and the key and the token go into
 * request headers (a token with CR LF would add headers of the endpoint's
 * choosing, or a whole request, to every request to the bucket). */
static int json_field(json_t *root, const char *name, char *dst, size_t cap, bool required)
{
	json_t *v = json_object_get(root, name);

	if (!v || json_is_null(v)) {
		if (required)
			return -EINVAL;
		dst[0] = '\0';
		return 0;
	}
	if (!json_is_string(v) || json_string_length(v) >= cap ||
	    strlen(json_string_value(v)) != json_string_length(v) ||
	    remote__s3_has_control(json_string_value(v), json_string_length(v)))
		return -EINVAL;
	memcpy(dst, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

int remote__s3_cred_json(const char *json, size_t len, struct s3_creds *out)
{
	json_error_t jerr;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	char expiration[64], code[64];
	json_t *version;
	int r = -EINVAL;

	memset(out, 0, sizeof(*out));
	if (!root || !json_is_object(root))
		goto out;
	if (json_field(root, "Code", code, sizeof(code), false) ||
	    (code[0] && strcmp(code, "Success")))
		goto out;
	version = json_object_get(root, "Version");
	if (version && !(json_is_integer(version) && json_integer_value(version) == 1))
		goto out;
	if (json_field(root, "AccessKeyId", out->access_key, sizeof(out->access_key), true) ||
	    json_field(root, "SecretAccessKey", out->secret_key, sizeof(out->secret_key), true) ||
	    json_field(root, "Token", out->token, sizeof(out->token), false) ||
	    (!out->token[0] &&
	     json_field(root, "SessionToken", out->token, sizeof(out->token), false)) ||
	    json_field(root, "Expiration", expiration, sizeof(expiration), false))
		goto out;
	if (!out->access_key[0] || !out->secret_key[0])
		goto out;
	if (expiration[0]) {
		int64_t ns;

		if (remote__s3_parse_time(expiration, &ns))
			goto out;
		out->expires_s = ns / 1000000000;
	}
	r = 0;
out:
	if (root)
		json_decref(root);
	if (r)
		memset(out, 0, sizeof(*out));
	return r;
}
