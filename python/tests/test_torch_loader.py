# SPDX-License-Identifier: Apache-2.0
"""shardfs.torch.pil_loader against torchvision's default loader, without
a mount: the same RGB pixels, and no ioctl on the file it loads (strace
-P counts the ioctls on that path in a child Python; torchvision's loader,
through open(path, "rb"), makes one a load: isatty()'s TCGETS)."""
import os
import shutil
import subprocess
import sys

import pytest
from PIL import Image
from torchvision.datasets.folder import default_loader

from shardfs.torch import pil_loader

LOADS = 3


def write_jpeg(path, size=(37, 23)):
    img = Image.new("RGB", size)
    img.putdata([((x * 7) % 256, (y * 11) % 256, (x + y) % 256)
                 for y in range(size[1]) for x in range(size[0])])
    img.save(path, "JPEG", quality=90)


def test_same_image_as_torchvision(tmp_path):
    path = str(tmp_path / "a.jpg")
    write_jpeg(path)
    mine, theirs = pil_loader(path), default_loader(path)
    assert mine.mode == theirs.mode == "RGB"
    assert mine.size == theirs.size == (37, 23)
    assert mine.tobytes() == theirs.tobytes()


def test_grayscale_is_converted(tmp_path):
    path = str(tmp_path / "g.png")
    Image.new("L", (5, 4), 77).save(path)
    img = pil_loader(path)
    assert img.mode == "RGB" and img.getpixel((2, 2)) == (77, 77, 77)


def test_missing_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        pil_loader(str(tmp_path / "none.jpg"))


def ioctls_on(path, loader_expr):
    """The ioctl lines strace saw on PATH while a child Python loaded it
    LOADS times with LOADER_EXPR."""
    log = path + ".strace"
    code = ("import sys\nfrom shardfs.torch import pil_loader\n"
            "from torchvision.datasets.folder import default_loader\n"
            "for _ in range(%d):\n    (%s)(sys.argv[1]).size\n" % (LOADS, loader_expr))
    subprocess.run(["strace", "-f", "--seccomp-bpf", "-qq", "-e", "trace=ioctl", "-P", path, "-o", log,
                    sys.executable, "-c", code, path],
                   check=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    with open(log) as f:
        return [line for line in f if "ioctl(" in line]


@pytest.mark.skipif(not shutil.which("strace"), reason="needs strace")
def test_no_ioctl_where_open_asks_isatty(tmp_path):
    path = str(tmp_path / "b.jpg")
    write_jpeg(path)
    theirs = ioctls_on(path, "default_loader")
    assert len(theirs) == LOADS and all("TCGETS" in line for line in theirs), theirs
    assert ioctls_on(path, "pil_loader") == []
