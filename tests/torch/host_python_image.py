"""Copies what this host's Python needs to run torch.distributed into DEST.

For tests/torch_container_test.sh: the root file system of a container
image made from the host's own files (no network). It imports torch, starts
a one-process gloo group, then copies, at their own paths under DEST: the
interpreter, its standard library, the dist-packages the run imported (with
their bytecode), every shared library mapped into the process (and the links
in the library directories that name them: the sonames the loader looks
for), the loader's cache. Usage: /usr/bin/python3 host_python_image.py DEST
"""
import os
import shutil
import sys
import tempfile

import numpy  # noqa: F401  (torch imports it lazily)
import torch
import torch.distributed as dist
import torch.nn.parallel  # noqa: F401


def main():
    dest = sys.argv[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29999",
                      RANK="0", WORLD_SIZE="1", GLOO_SOCKET_IFNAME="lo")
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/rdzv",
                                rank=0, world_size=1)
        dist.all_reduce(torch.tensor([1.0]))
        dist.destroy_process_group()

    files = set()
    for line in open("/proc/self/maps"):
        parts = line.split()
        if len(parts) >= 6 and parts[5].startswith("/") and ".so" in parts[5]:
            files.add(os.path.realpath(parts[5]))
    files.add(os.path.realpath(sys.executable))
    files.add("/etc/ld.so.cache")
    trees = {os.path.dirname(os.__file__)}  # the standard library
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None) or ""
        if "/dist-packages/" in path:
            root, rest = path.split("/dist-packages/", 1)
            top = rest.split("/")[0]
            entry = os.path.join(root, "dist-packages", top)
            (trees if os.path.isdir(entry) else files).add(entry)

    def copy(src):
        out = dest + src
        os.makedirs(os.path.dirname(out), exist_ok=True)
        if not os.path.exists(out):
            shutil.copy2(src, out)

    for f in sorted(files):
        copy(f)
    for t in sorted(trees):
        # With their __pycache__: in a read-only image Python would
        # otherwise compile every module it imports at each start (torch's
        # take seconds), and could not keep the bytecode.
        shutil.copytree(t, dest + t, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("test", "tests"))
    # The names the loader and the interpreter are found by.
    for d in ("/usr/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/bin"):
        for entry in os.scandir(d):
            if not entry.is_symlink():
                continue
            target = os.path.realpath(entry.path)
            if target in files and not os.path.lexists(dest + entry.path):
                os.makedirs(dest + d, exist_ok=True)
                os.symlink(target, dest + entry.path)
    for link, target in (("lib", "usr/lib"), ("lib64", "usr/lib64")):
        if not os.path.lexists(os.path.join(dest, link)):
            os.symlink(target, os.path.join(dest, link))
    size = sum(os.path.getsize(os.path.join(r, f))
               for r, _, fs in os.walk(dest) for f in fs
               if not os.path.islink(os.path.join(r, f)))
    print(f"{size / 1e6:.0f} MB in {dest}")


if __name__ == "__main__":
    main()
