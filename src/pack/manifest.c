/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manifest.c - shards.json, the description of a finished shard set.
 *
 * It lists the shards in order, each with its file name (relative to the
 * manifest, which sits next to the shards), its sample count, its size
 * and the XXH3-64 hash of the whole file as 16 hex digits, so shardfs or
 * anyone else can check a shard before trusting it.  It holds no times,
 * so it is as reproducible as the shards.
 *
 * It is written last, through a temporary name and rename() like the
 * shards, so a shards.json that exists always describes a complete set;
 * the directory is then synced, which makes the renames of the shards
 * durable too.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pack.h"

#define MANIFEST_NAME "shards.json"

/* Write @s as a JSON string; bytes that are not UTF-8 pass unchanged. */
static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* Write the JSON text of the manifest to @f. */
static int manifest_print(FILE *f, const struct pack_plan *plan,
			  const struct pack_pattern *pattern,
			  const struct pack_shard_result *results)
{
	char path[PACK_PATH_MAX];

	fprintf(f, "{\n  \"version\": 1,\n  \"hash\": \"xxh3_64\",\n"
		"  \"samples\": %" PRIu64 ",\n  \"bytes\": %" PRIu64 ",\n"
		"  \"shards\": [", plan->samples, plan->bytes);
	for (size_t i = 0; i < plan->shard_count; i++) {
		const struct pack_shard *shard = &plan->shards[i];
		const char *slash;
		int rc;

		rc = pack_pattern_format(pattern, i, path, sizeof(path));
		if (rc)
			return rc;
		slash = strrchr(path, '/');
		fputs(i ? ",\n    {\"name\": " : "\n    {\"name\": ", f);
		json_string(f, slash ? slash + 1 : path);
		fprintf(f, ", \"samples\": %" PRIu64 ", \"bytes\": %" PRIu64
			", \"xxh3\": \"%016" PRIx64 "\"}", shard->samples,
			shard->bytes, results[i].xxh3);
	}
	fputs(plan->shard_count ? "\n  ]\n}\n" : "]\n}\n", f);
	return 0;
}

/* Make the entries of directory @dir durable. */
static int sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return pack_errno(dir, "cannot open directory");
	if (fsync(fd))
		rc = pack_errno(dir, "cannot sync directory");
	close(fd);
	return rc;
}

int pack_manifest_write(const struct pack_plan *plan,
			const struct pack_pattern *pattern,
			const struct pack_shard_result *results)
{
	char path[PACK_PATH_MAX], temp[PACK_PATH_MAX];
	FILE *f;
	int rc;

	snprintf(path, sizeof(path), "%s/" MANIFEST_NAME, pattern->dir);
	if ((size_t)snprintf(temp, sizeof(temp), "%s.part", path) >=
	    sizeof(temp)) {
		pack_error("%s.part: path longer than %u bytes", path,
			   PACK_PATH_MAX - 1);
		return -ENAMETOOLONG;
	}
	f = fopen(temp, "we");
	if (!f)
		return pack_errno(temp, "cannot create");
	rc = manifest_print(f, plan, pattern, results);
	errno = 0;
	if (!rc && (fflush(f) || ferror(f) || fsync(fileno(f))))
		rc = errno ? -errno : -EIO;
	if (fclose(f) && !rc)
		rc = -errno;
	if (!rc && rename(temp, path))
		rc = -errno;
	if (rc) {
		pack_error("%s: cannot write: %s", path, strerror(-rc));
		unlink(temp);
		return rc;
	}
	return sync_dir(pattern->dir);
}
