# SPDX-License-Identifier: Apache-2.0
"""The web site the http:// suites mount (test_remote_http.py for what
must hold, test_perf.py for what it costs): fixtures for the shards and
their reference tree, nginx per test and a private index cache, and the
request counts read from a mount.  A suite imports the fixtures it uses
by name (pytest finds fixtures in the test module's namespace).
"""
import os
import time

import pytest

import remote_servers as rs
import shardfs_testlib as lib

from remote_servers import make_shards, remote_stats


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(www root, shard names, reference tree) shared by the tests."""
    work = tmp_path_factory.mktemp("www")
    www = work / "www"
    www.mkdir()
    names = make_shards(www)
    ref = work / "ref"
    lib.extract_reference_ok([www / n for n in names], ref)
    return www, names, ref


@pytest.fixture
def url(site, tmp_path):
    """nginx serving the site for one test."""
    with rs.nginx(site[0], str(tmp_path / "ng")) as base:
        yield base


@pytest.fixture
def cache_env(tmp_path):
    """A private index cache, so that tests do not share index files."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    return env


def requests(mnt):
    """GETs the mount made, not counting retries: a loaded machine may
    time a connection out now and then, and a retry is not a request the
    design makes."""
    st = remote_stats(mnt)
    return st["requests"] - st["retries"]


def settled_stats(mnt, timeout=20):
    """remote_stats once the GETs in flight finished: a read returns as
    soon as its bytes came, its GET goes on to the end of its chunk."""
    st, deadline = remote_stats(mnt), time.time() + timeout
    while time.time() < deadline:
        time.sleep(0.2)
        now = remote_stats(mnt)
        if now["bytes"] == st["bytes"]:
            break
        st = now
    return st


def spec(url, names):
    return "%s/shard-{000000..%06d}.tar" % (url, len(names) - 1)
