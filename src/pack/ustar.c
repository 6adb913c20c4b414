/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ustar.c - member headers in POSIX ustar form, with PAX records.
 *
 * A member gets a plain 512-byte ustar header when every value fits its
 * field, and a PAX 'x' member in front of that header carrying each value
 * that does not: paths longer than name + prefix can hold, link targets
 * over 100 bytes, sizes of 8 GiB and more, mtimes with a fraction or
 * outside 1970..2242, ids of 2^21 and more, user and group names of 32
 * bytes and more.  Such string values that are not UTF-8 are flagged with
 * "hdrcharset=BINARY", as POSIX asks.
 *
 * Nothing else is recorded: no atime or ctime, no process id in the name
 * of the 'x' member.  A header therefore depends on the entry alone, which
 * is what makes shards byte-for-byte reproducible, and the planner can
 * size a shard exactly by encoding its headers ahead of time.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pack.h"

/* The ustar header, as laid out by POSIX.1-1988. */
struct ustar_block {
	char name[100];		/* path, or its part after prefix */
	char mode[8];		/* permission bits, octal */
	char uid[8];		/* owner id, octal */
	char gid[8];		/* group id, octal */
	char size[12];		/* bytes of data, octal */
	char mtime[12];		/* modification time, octal seconds */
	char chksum[8];		/* sum of the header's bytes, octal */
	char typeflag;		/* '0' file, '2' symlink, '5' directory, 'x' */
	char linkname[100];	/* symlink target */
	char magic[6];		/* "ustar" and a NUL */
	char version[2];	/* "00" */
	char uname[32];		/* owner name, NUL-terminated */
	char gname[32];		/* group name, NUL-terminated */
	char devmajor[8];	/* device numbers: always 0 here */
	char devminor[8];	/* likewise */
	char prefix[155];	/* leading directories of a long path */
	char pad[12];		/* unused, zero */
};

_Static_assert(sizeof(struct ustar_block) == PACK_BLOCK,
	       "ustar header is one block");
_Static_assert(PACK_PAX_MAX % PACK_BLOCK == 0,
	       "padded PAX records fit in PACK_HEADER_MAX");

/* Values that need a PAX record, as a bit mask. */
enum pax_need {
	PAX_PATH = 1 << 0,
	PAX_LINK = 1 << 1,
	PAX_SIZE = 1 << 2,
	PAX_MTIME = 1 << 3,
	PAX_UID = 1 << 4,
	PAX_GID = 1 << 5,
	PAX_UNAME = 1 << 6,
	PAX_GNAME = 1 << 7,
};

/* Name of every 'x' member: fixed, so that output is reproducible. */
#define PAX_MEMBER_NAME "././@PaxHeader"

/* Write @value as zero-padded octal and a NUL; false if it does not fit. */
static bool put_octal(char *field, size_t len, uint64_t value)
{
	size_t digits = len - 1;

	if (digits < 22 && value >> (3 * digits))
		return false;
	for (size_t i = digits; i-- > 0; value >>= 3)
		field[i] = (char)('0' + (value & 7));
	field[digits] = '\0';
	return true;
}

/* Write @value, or 0 when it does not fit; return whether it fit. */
static bool put_number(char *field, size_t len, uint64_t value)
{
	if (put_octal(field, len, value))
		return true;
	put_octal(field, len, 0);
	return false;
}

/*
 * Copy @len bytes of @s into a field of @size bytes, NUL-padded when
 * shorter.  A string that does not fit is cut, so that readers without
 * PAX support see at least its beginning; returns whether it fit.
 */
static bool put_string(char *field, size_t size, const char *s, size_t len)
{
	memcpy(field, s, len < size ? len : size);
	return len <= size;
}

/* Store a user or group name, which must leave room for a NUL. */
static bool put_name(char *field, size_t size, const char *name)
{
	size_t len = strlen(name);

	if (len >= size)
		return false;
	memcpy(field, name, len);
	return true;
}

/*
 * Store a path in name, or split it at a '/' into prefix and name.  The
 * split takes the shortest prefix that leaves a name of at most 100 bytes.
 */
static bool put_path(struct ustar_block *h, const char *path, size_t len)
{
	size_t i;

	if (len <= sizeof(h->name))
		return put_string(h->name, sizeof(h->name), path, len);
	for (i = len - sizeof(h->name) - 1; i < len - 1; i++)
		if (path[i] == '/')
			break;
	if (i >= len - 1 || i > sizeof(h->prefix))
		return put_string(h->name, sizeof(h->name), path, len);
	memcpy(h->prefix, path, i);
	memcpy(h->name, path + i + 1, len - i - 1);
	return true;
}

/* Fill the ustar header of @e; return what must go into PAX records. */
static unsigned ustar_fill(struct ustar_block *h, const struct pack_entry *e)
{
	uint64_t mtime = e->mtime_sec < 0 ? 0 : (uint64_t)e->mtime_sec;
	unsigned need = 0;

	memset(h, 0, sizeof(*h));
	h->typeflag = e->type;
	put_octal(h->mode, sizeof(h->mode), e->mode & 07777);
	if (!put_path(h, e->path, e->path_len))
		need |= PAX_PATH;
	if (e->link && !put_string(h->linkname, sizeof(h->linkname), e->link,
				   strlen(e->link)))
		need |= PAX_LINK;
	if (!put_number(h->uid, sizeof(h->uid), e->uid))
		need |= PAX_UID;
	if (!put_number(h->gid, sizeof(h->gid), e->gid))
		need |= PAX_GID;
	if (!put_number(h->size, sizeof(h->size), e->size))
		need |= PAX_SIZE;
	if (!put_number(h->mtime, sizeof(h->mtime), mtime) ||
	    e->mtime_sec < 0 || e->mtime_nsec)
		need |= PAX_MTIME;
	if (!put_name(h->uname, sizeof(h->uname), e->uname))
		need |= PAX_UNAME;
	if (!put_name(h->gname, sizeof(h->gname), e->gname))
		need |= PAX_GNAME;
	return need;
}

/* Continuation bytes that follow the UTF-8 lead byte @c. */
static size_t utf8_tail(unsigned char c)
{
	return c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
}

/* Whether @len bytes at @s are well-formed UTF-8 (RFC 3629). */
static bool utf8_valid(const unsigned char *s, size_t len)
{
	static const uint32_t min_cp[] = { 0, 0x80, 0x800, 0x10000 };
	size_t i = 0;

	while (i < len) {
		unsigned char c = s[i];
		uint32_t cp;
		size_t n;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c < 0xc2 || c > 0xf4)
			return false;
		n = utf8_tail(c);
		if (len - i <= n)
			return false;
		cp = c & (0x7fu >> (n + 1));
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if (cp < min_cp[n] || cp > 0x10ffff ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += n + 1;
	}
	return true;
}

/* Whether the string values that go into PAX records are all UTF-8. */
static bool pax_strings_utf8(const struct pack_entry *e, unsigned need)
{
	const struct {
		unsigned bit;		/* the value's pax_need bit */
		const char *s;		/* the value */
	} strings[] = {
		{ PAX_LINK, e->link }, { PAX_UNAME, e->uname },
		{ PAX_GNAME, e->gname },
	};

	if ((need & PAX_PATH) &&
	    !utf8_valid((const unsigned char *)e->path, e->path_len))
		return false;
	for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++)
		if ((need & strings[i].bit) &&
		    !utf8_valid((const unsigned char *)strings[i].s,
				strlen(strings[i].s)))
			return false;
	return true;
}

/*
 * Append the record "LEN KEY=VALUE\n" at @off in @out and return the
 * offset after it.  LEN counts the whole record, its own digits included.
 */
static size_t pax_put(char *out, size_t off, const char *key,
		      const char *val, size_t vlen)
{
	size_t body = strlen(key) + vlen + 3;
	size_t digits = 1;
	int n;

	while ((size_t)snprintf(NULL, 0, "%zu", body + digits) != digits)
		digits++;
	assert(off + body + digits <= PACK_PAX_MAX);
	n = sprintf(out + off, "%zu %s=", body + digits, key);
	memcpy(out + off + n, val, vlen);
	out[off + body + digits - 1] = '\n';
	return off + body + digits;
}

/* Decimal seconds with the fraction trimmed, as PAX wants times. */
static size_t format_time(char *buf, int64_t sec, uint32_t nsec)
{
	uint64_t whole = sec < 0 ? 0 - (uint64_t)sec : (uint64_t)sec;
	uint32_t frac = nsec;
	int len;

	assert(nsec < 1000000000);
	if (sec < 0 && nsec) {
		whole--;
		frac = 1000000000 - nsec;
	}
	len = sprintf(buf, "%s%" PRIu64, sec < 0 ? "-" : "", whole);
	if (frac) {
		len += sprintf(buf + len, ".%09" PRIu32, frac);
		while (buf[len - 1] == '0')
			len--;
	}
	return (size_t)len;
}

/* Append a record whose value is the decimal number @value. */
static size_t pax_put_number(char *out, size_t off, const char *key,
			     uint64_t value)
{
	char num[24];
	int len = snprintf(num, sizeof(num), "%" PRIu64, value);

	return pax_put(out, off, key, num, (size_t)len);
}

/* Append the mtime record of @e. */
static size_t pax_put_mtime(char *out, size_t off, const struct pack_entry *e)
{
	char num[32];
	size_t len = format_time(num, e->mtime_sec, e->mtime_nsec);

	return pax_put(out, off, "mtime", num, len);
}

/* Write the PAX records @need asks for into @out; return their length. */
static size_t pax_fill(char *out, const struct pack_entry *e, unsigned need)
{
	size_t off = 0;

	if (!pax_strings_utf8(e, need))
		off = pax_put(out, off, "hdrcharset", "BINARY", 6);
	if (need & PAX_PATH)
		off = pax_put(out, off, "path", e->path, e->path_len);
	if (need & PAX_LINK)
		off = pax_put(out, off, "linkpath", e->link, strlen(e->link));
	if (need & PAX_SIZE)
		off = pax_put_number(out, off, "size", e->size);
	if (need & PAX_MTIME)
		off = pax_put_mtime(out, off, e);
	if (need & PAX_UID)
		off = pax_put_number(out, off, "uid", e->uid);
	if (need & PAX_GID)
		off = pax_put_number(out, off, "gid", e->gid);
	if (need & PAX_UNAME)
		off = pax_put(out, off, "uname", e->uname, strlen(e->uname));
	if (need & PAX_GNAME)
		off = pax_put(out, off, "gname", e->gname, strlen(e->gname));
	return off;
}

/* Set the fields every header shares, then the checksum over them all. */
static void ustar_finish(struct ustar_block *h)
{
	const unsigned char *p = (const unsigned char *)h;
	unsigned sum = 0;

	memcpy(h->magic, "ustar", 6);
	memcpy(h->version, "00", 2);
	put_octal(h->devmajor, sizeof(h->devmajor), 0);
	put_octal(h->devminor, sizeof(h->devminor), 0);
	memset(h->chksum, ' ', sizeof(h->chksum));
	for (size_t i = 0; i < sizeof(*h); i++)
		sum += p[i];
	snprintf(h->chksum, sizeof(h->chksum), "%06o", sum);
}

/* The header of the 'x' member that carries @len bytes of records. */
static void pax_header(struct ustar_block *x, size_t len)
{
	memset(x, 0, sizeof(*x));
	memcpy(x->name, PAX_MEMBER_NAME, strlen(PAX_MEMBER_NAME));
	put_octal(x->mode, sizeof(x->mode), 0644);
	put_octal(x->uid, sizeof(x->uid), 0);
	put_octal(x->gid, sizeof(x->gid), 0);
	put_octal(x->size, sizeof(x->size), len);
	put_octal(x->mtime, sizeof(x->mtime), 0);
	x->typeflag = 'x';
	ustar_finish(x);
}

size_t pack_ustar_encode(const struct pack_entry *e, unsigned char *buf)
{
	struct ustar_block h, x;
	unsigned need = ustar_fill(&h, e);
	size_t pax_len, off = 0;

	ustar_finish(&h);
	if (need) {
		pax_len = pax_fill((char *)buf + PACK_BLOCK, e, need);
		off = PACK_BLOCK + pack_padded(pax_len);
		memset(buf + PACK_BLOCK + pax_len, 0,
		       off - PACK_BLOCK - pax_len);
		pax_header(&x, pax_len);
		memcpy(buf, &x, PACK_BLOCK);
	}
	memcpy(buf + off, &h, PACK_BLOCK);
	return off + PACK_BLOCK;
}
