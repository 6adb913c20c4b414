# SPDX-License-Identifier: Apache-2.0
"""Third-party archives (CPython and libarchive test data, see
tests/data/conformance/README.md) mounted and compared with GNU tar.

EXPECTED gives, per archive, GNU tar's exit status on it (checked again at
test time: a different status fails the test, so the table cannot go
stale) and what shardfs must do:

  match     GNU tar extracts it without error: the mount must equal the
            extraction (paths, types, bytes, modes, mtimes, owners, links).
  refuse    GNU tar rejects it: shardfs must exit 1 with a 'shardfs: ' line
            naming the archive and 'offset N' (N inside the file), leave
            nothing mounted.
  inner     a compressed archive GNU tar fails to decompress: the mount
            must equal GNU tar's extraction of the decompressed stream.
  compressed  a tar compressed with what shardfs does not serve (gzip and
            zstd archives are served, and so 'match'): the file itself must be
            refused (exit 1, offset 0); the test then decompresses it and
            treats the result by the inner entry ('match' or 'refuse').
"""
import bz2
import gzip
import lzma
import os
import shutil
import subprocess

import pytest

import shardfs_testlib as lib

DATA = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "data",
                                    "conformance"))

M, R = "match", "refuse"
# match, after growing one file of the reference to its declared size
# (see the gtar_sparse_skip_entry entry)
REALSIZE = "match at the declared GNU.sparse.realsize"
# match the extraction of the decompressed stream (GNU tar fails on the
# compressed file itself)
INNER = "match the decompressed archive"

# archive -> (GNU tar exit status, shardfs outcome[, inner outcome])
EXPECTED = {
    "cpython/recursion.tar": (2, R),        # pax header then EOF mid-block
    "cpython/testtar.tar": (0, M),
    "cpython/testtar.tar.xz": (0, "compressed", M),
    "libarchive/test_acl_pax_nfs4.tar": (0, M),
    "libarchive/test_acl_pax_posix1e.tar": (0, M),
    "libarchive/test_compat_bzip2_1.tbz": (0, "compressed", M),
    "libarchive/test_compat_gtar_1.tar": (0, M),
    "libarchive/test_compat_gtar_2.tar": (0, M),
    "libarchive/test_compat_gzip_1.tgz": (0, M),
    "libarchive/test_compat_mac-1.tar": (0, M),
    "libarchive/test_compat_mac-2.tar": (0, M),
    "libarchive/test_compat_perl_archive_tar.tar": (0, M),
    "libarchive/test_compat_plexus_archiver_tar.tar": (0, M),
    "libarchive/test_compat_solaris_pax_sparse_1.pax.tar": (0, M),
    "libarchive/test_compat_solaris_pax_sparse_2.pax.tar": (0, M),
    "libarchive/test_compat_solaris_tar_acl.tar": (0, M),
    "libarchive/test_compat_star_acl_nfs4.tar": (0, M),
    "libarchive/test_compat_star_acl_posix1e.tar": (0, M),
    "libarchive/test_compat_tar_directory_1.tar": (0, M),
    "libarchive/test_compat_tar_hardlink_1.tar": (0, M),
    "libarchive/test_compat_xz_1.txz": (0, "compressed", M),
    "libarchive/test_compat_zstd_1.tar.zst": (0, M),
    # GNU tar does not take its leading skippable frame for zstd and fails;
    # the decompressed tar is fine, and so is the mount
    "libarchive/test_compat_zstd_2.tar.zst": (2, INNER),
    "libarchive/test_extract.tar.bz2": (0, "compressed", M),
    "libarchive/test_extract.tar.gz": (0, M),
    "libarchive/test_extract.tar.xz": (0, "compressed", M),
    "libarchive/test_extract.tar.zst": (0, M),
    "libarchive/test_leading_slash.tar": (0, M),
    "libarchive/test_option_s.tar": (0, M),
    "libarchive/test_pax_filename_encoding.tar": (0, M),
    "libarchive/test_pax_xattr_header_all.tar": (0, M),
    "libarchive/test_pax_xattr_header_libarchive.tar": (0, M),
    "libarchive/test_pax_xattr_header_schily.tar": (0, M),
    "libarchive/test_print_longpath.tar": (0, M),
    "libarchive/test_read_format_gtar_filename_cp866.tar": (0, M),
    "libarchive/test_read_format_gtar_filename_eucjp.tar": (0, M),
    "libarchive/test_read_format_gtar_filename_koi8r.tar": (0, M),
    "libarchive/test_read_format_gtar_redundant_L.tar": (0, M),
    "libarchive/test_read_format_gtar_sparse_1_13.tar": (0, M),
    "libarchive/test_read_format_gtar_sparse_1_17.tar": (0, M),
    "libarchive/test_read_format_gtar_sparse_1_17_posix00.tar": (0, M),
    "libarchive/test_read_format_gtar_sparse_1_17_posix01.tar": (0, M),
    "libarchive/test_read_format_gtar_sparse_1_17_posix10.tar": (0, M),
    # hand-broken GNU.sparse 1.0 map: GNU tar reports a malformed member
    "libarchive/test_read_format_gtar_sparse_1_17_posix10_modified.tar": (2, R),
    "libarchive/test_read_format_gtar_sparse_length.tar": (0, M),
    # GNU.sparse.realsize is 10737418244 but the map's last chunk ends at
    # 10737418243 and has no closing zero-length entry.  GNU tar's
    # extraction stops where the map ends; shardfs, like libarchive, serves
    # the declared realsize, the missing last byte being a hole (zero).
    # Everything else must equal GNU tar's extraction.
    "libarchive/test_read_format_gtar_sparse_skip_entry.tar":
        (0, REALSIZE, 10737418244),
    # 'V' header whose base-256 size is negative
    "libarchive/test_read_format_tar_V_negative_size.tar": (2, R),
    # second header has a bad checksum
    "libarchive/test_read_format_tar_acl_oob_read.tar": (2, R),
    "libarchive/test_read_format_tar_concatenated.tar": (0, M),
    "libarchive/test_read_format_tar_empty_filename.tar": (0, M),
    "libarchive/test_read_format_tar_empty_pax.tar": (0, M),
    "libarchive/test_read_format_tar_empty_with_gnulabel.tar": (0, M),
    "libarchive/test_read_format_tar_filename_koi8r.tar": (0, M),
    # pax size record with a huge negative value
    "libarchive/test_read_format_tar_invalid_pax_size.tar": (2, R),
    "libarchive/test_read_format_tar_mac_metadata_1.tar": (0, M),
    # global pax header claiming 4 GB in a 2 KiB file
    "libarchive/test_read_format_tar_pax_g_large.tar": (2, R),
    "libarchive/test_read_format_tar_pax_large_attr.tar": (0, M),
    "libarchive/test_read_format_tar_pax_negative_time.tar": (0, M),
    "libarchive/test_read_format_tar_pax_sun_holesdata.tar": (0, M),
    "libarchive/test_read_format_tar_pax_timestamps.tar": (0, M),
    "libarchive/test_read_format_tar_timestamp_overflow.tar": (0, M),
    "libarchive/test_read_format_ustar_filename_cp866.tar": (0, M),
    "libarchive/test_read_format_ustar_filename_eucjp.tar": (0, M),
    "libarchive/test_read_format_ustar_filename_koi8r.tar": (0, M),
    # malformed pax record (no newline): GNU tar flags the archive
    "libarchive/test_read_pax_empty_val_no_nl.tar": (2, R),
    "libarchive/test_read_pax_xattr_rht_security_selinux.tar": (0, M),
    "libarchive/test_read_pax_xattr_schily.tar": (0, M),
    "libarchive/test_write_disk_mac_metadata.tar.gz": (0, M),
}


def test_table_covers_every_archive():
    on_disk = set()
    for sub in ("cpython", "libarchive"):
        on_disk |= {sub + "/" + n for n in os.listdir(os.path.join(DATA, sub))}
    assert on_disk == set(EXPECTED), (sorted(on_disk - set(EXPECTED)),
                                      sorted(set(EXPECTED) - on_disk))


def decompress(path, out):
    if path.endswith((".gz", ".tgz")):
        data = gzip.decompress(open(path, "rb").read())
    elif path.endswith((".bz2", ".tbz")):
        data = bz2.decompress(open(path, "rb").read())
    elif path.endswith((".xz", ".txz")):
        data = lzma.decompress(open(path, "rb").read())
    elif path.endswith(".zst"):
        if not shutil.which("zstd"):
            pytest.skip("zstd is not installed")
        data = subprocess.run(["zstd", "-dc", path], stdout=subprocess.PIPE,
                              check=True).stdout
    else:
        raise AssertionError("unknown compression: " + path)
    with open(out, "wb") as f:
        f.write(data)
    return out


# Owners no filesystem can show as tar -x leaves them: uid/gid 4294967295
# is (uid_t)-1, which chown(2) takes as "leave unchanged", so tar -x leaves
# the file owned by root while a FUSE mount reports the overflow id.
OWNER_EXCEPTIONS = {
    "cpython/testtar.tar": {b"gnu/regtype-gnu-uid"},
}


def grow_to_realsize(ref, realsize):
    """Extend the one reference file that stops short of REALSIZE."""
    grown = 0
    for dirpath, _, files in os.walk(ref):
        for f in files:
            full = os.path.join(dirpath, f)
            st = os.stat(full)
            if 0 < realsize - st.st_size < 4096:
                os.truncate(full, realsize)
                os.utime(full, ns=(st.st_atime_ns, st.st_mtime_ns))
                grown += 1
    assert grown == 1, "expected exactly one short sparse file, found %d" % grown


# Archives GNU tar and shardfs agree on but libarchive reads otherwise, so
# that shardfs-index --verify reports differences: what it reports.
LIBARCHIVE_DISAGREES = {
    # GNU sparse 1.0 with an old-style size field: libarchive says 0 bytes
    "libarchive/test_read_format_gtar_sparse_length.tar": "size 1279 in the index, 0 for libarchive",
    # libarchive skips the member after the sparse entry
    "libarchive/test_read_format_gtar_sparse_skip_entry.tar": "b: the index serves a file libarchive does not find",
    # an 8 MB pax attribute: libarchive stops before the member
    "libarchive/test_read_format_tar_pax_large_attr.tar": "foo: the index serves a file libarchive does not find",
}


def expect_verified(archive, name, options=()):
    """shardfs-index --verify agrees with libarchive (or reports the known
    disagreement)."""
    r = lib.run_cmd([lib.binary("shardfs-index"), "-o", "index_mode=off", *options,
                     "--verify", str(archive)])
    if name in LIBARCHIVE_DISAGREES:
        assert r.returncode == 1 and LIBARCHIVE_DISAGREES[name] in r.stdout, r
    else:
        assert r.returncode == 0 and r.stdout == "", r
        assert " 0 differences" in r.stderr, r


def expect_match(tmp_path, archive, name, realsize=None, options=()):
    ref = tmp_path / "ref"
    shutil.rmtree(ref, ignore_errors=True)
    start_ns, results = lib.extract_reference([archive], ref)
    assert results[0].returncode == 0, results[0]
    if realsize is not None:
        grow_to_realsize(ref, realsize)
    with lib.mounted(str(archive), tmp_path / "mnt", *options):
        lib.compare_trees(tmp_path / "mnt", ref, start_ns,
                          owner_exceptions=OWNER_EXCEPTIONS.get(name, ()))
    expect_verified(archive, name, options)


def expect_refusal(tmp_path, archive):
    mnt = tmp_path / "mnt"
    os.makedirs(mnt, exist_ok=True)
    r, was_mounted, daemon_left = lib.run_shardfs_expect_failure(str(archive), mnt)
    assert r.returncode == 1, "expected exit 1 (refused), got %r" % (r,)
    assert not was_mounted and not daemon_left
    size = os.path.getsize(archive)
    lib.assert_error_names(r.stderr, archive, set(range(0, max(size, 1))))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_conformance_archive(tmp_path, name):
    # work on a copy: the data directory of the repository stays untouched
    # whatever shardfs writes next to its shards (e.g. an index file)
    path = str(tmp_path / os.path.basename(name))
    shutil.copyfile(os.path.join(DATA, name), path)
    want_tar_rc, outcome = EXPECTED[name][:2]
    # GNU tar's verdict, measured now (the table must agree)
    start_ns, results = lib.extract_reference([path], tmp_path / "tarcheck")
    assert results[0].returncode == want_tar_rc, \
        "GNU tar exit status changed for %s: %r" % (name, results[0])
    shutil.rmtree(tmp_path / "tarcheck")
    if outcome == M:
        expect_match(tmp_path, path, name)
    elif outcome == REALSIZE:
        expect_match(tmp_path, path, name, realsize=EXPECTED[name][2])
    elif outcome == R:
        expect_refusal(tmp_path, path)
    elif outcome == INNER:
        inner = decompress(path, str(tmp_path / "inner.tar"))
        start_ns, results = lib.extract_reference([inner], tmp_path / "ref")
        assert results[0].returncode == 0, results[0]
        with lib.mounted(path, tmp_path / "mnt"):
            lib.compare_trees(tmp_path / "mnt", tmp_path / "ref", start_ns)
        expect_verified(path, name)
    else:
        # xz, bzip2: refused without a decoded cache, saying so ...
        mnt = tmp_path / "mnt"
        os.makedirs(mnt)
        r, was_mounted, daemon_left = lib.run_shardfs_expect_failure(path, mnt)
        assert r.returncode == 1, r
        assert not was_mounted and not daemon_left
        lib.assert_error_names(r.stderr, path, 0)
        assert "cache_dir" in r.stderr, r.stderr
        # ... served from it with one, equal to GNU tar's extraction
        cache = tmp_path / "cache"
        cache.mkdir()
        if EXPECTED[name][2] == M:
            expect_match(tmp_path, path, name, options=("-o", "cache_dir=%s" % cache))
        inner = decompress(path, str(tmp_path / "inner.tar"))
        if EXPECTED[name][2] == M:
            expect_match(tmp_path, inner, name)
        else:
            expect_refusal(tmp_path, inner)
