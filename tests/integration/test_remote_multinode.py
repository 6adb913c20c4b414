# SPDX-License-Identifier: Apache-2.0
"""Two ranks, each with its own s3:// mount of the same shards (as two
nodes would have), train with ShardAwareSampler over torch.distributed
(gloo, CPU): each rank reads its own shards, so each mount fetches about
half of the bytes (from its /.shardfs/stats), and together the ranks see
every sample once.
"""
import json
import os
import subprocess
import sys

import imagedata
import remote_servers as rs
import shardfs_testlib as lib
from remote_servers import remote_stats

SAMPLES = 320
SHARDS = 8

RANK_SCRIPT = r"""
import json, os, sys
import torch.distributed as dist
from torch.utils.data import DataLoader
from torchvision import datasets
sys.path.insert(0, sys.argv[4])
from shardfs.torch import ShardAwareSampler
rank, port, mnt = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + port,
                        rank=rank, world_size=2)
ds = datasets.ImageFolder(os.path.join(mnt, "train"), loader=lambda p: open(p, "rb").read())
sampler = ShardAwareSampler(ds, window=1, drop_last=False)
seen = []
for i in sampler:
    ds[i]
    seen.append(os.path.relpath(ds.samples[i][0], ds.root))
dist.barrier()
print(json.dumps(seen))
"""


def test_two_ranks_fetch_half_each(tmp_path):
    shards, _ = imagedata.imagefolder_shards(tmp_path / "data", SAMPLES, SHARDS)
    total = sum(os.path.getsize(s) for s in shards)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=rs.ACCESS_KEY, AWS_SECRET_ACCESS_KEY=rs.SECRET_KEY,
               XDG_CACHE_HOME=str(tmp_path / "cache"))
    repo_python = os.path.join(os.path.dirname(__file__), "..", "..", "python")
    with rs.s3_server(str(tmp_path), ["data"]) as (stats, url, upload):
        for s in shards:
            upload("data", "set/" + os.path.basename(s), s)
        spec = "s3://data/set/"
        opts = ("-o", "endpoint=%s,region=%s,chunk_size=64K,cache_mem=1M"
                % (url, rs.REGION))
        with lib.mounted(spec, tmp_path / "build", *opts, env=env):
            pass    # builds and caches the index: both "nodes" load it
        mnts = [tmp_path / "node0", tmp_path / "node1"]
        with lib.mounted(spec, mnts[0], *opts, env=env), \
                lib.mounted(spec, mnts[1], *opts, env=env):
            port = str(rs.free_port())
            procs = [subprocess.Popen(
                [sys.executable, "-c", RANK_SCRIPT, str(r), port, str(mnts[r]),
                 repo_python], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for r in range(2)]
            outs = [p.communicate(timeout=300) for p in procs]
            for p, (_, err) in zip(procs, outs):
                assert p.returncode == 0, err
            fetched = [remote_stats(m)["bytes"] for m in mnts]
    seen = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert sorted(seen[0] + seen[1]) == sorted(set(seen[0] + seen[1]))
    assert len(seen[0]) + len(seen[1]) == SAMPLES
    for f in fetched:
        # about half each: shards are whole to one rank, chunks round up
        assert 0.3 * total < f < 0.7 * total, (fetched, total)
    print("bytes fetched per node: %s of %d" % (fetched, total))
