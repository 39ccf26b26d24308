"""`pip wheel .` makes a wheel that pins the torch it was built against, and that wheel installs into a fresh venv
without a compiler or the network and imports and loads a folder there.

Usage: check_wheel.py SOURCE_DIR BUILD_DIR PINFEED_EXE

The wheel's CMake build folder is BUILD_DIR's sibling `build-wheel`, compiled through ccache with the base folder
SOURCE_DIR as scripts/setup.sh sets it: at the same depth below SOURCE_DIR as the development build, every compile
it shares with that build is a cache hit, and the test takes about a minute instead of the full compile.
The fresh venv sees the torch of this test's Python (a .pth file naming its site-packages), the "same torch" a
user installs the wheel beside.
"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import zipfile

from check_common import fail, gen_data, skip_without

with skip_without("the Python module is built with the venv's torch"):
    import torch


# Cache entries of the development build the wheel's CMake is given too: the compilers, the GPU architectures and
# the headers it found outside the system's folders.
DEFINES_FROM_THE_BUILD = ["CMAKE_CUDA_COMPILER", "CMAKE_CUDA_ARCHITECTURES", "PINFEED_CUDA_ARCHITECTURES",
                          "PINFEED_CUDNN_FRONTEND_INCLUDE", "GLOO_INCLUDE_DIR", "CMAKE_CXX_COMPILER"]


def run(cmd, env=None, cwd=None):
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def main():
    source, build, exe = (pathlib.Path(a).resolve() for a in sys.argv[1:4])
    wheel_build = build.parent / "build-wheel"
    env = dict(os.environ)
    env.setdefault("CCACHE_BASEDIR", str(source))
    # The development build's answers to what the compile commands depend on: the same commands, the same hits.
    cache = dict(re.findall(r"^([A-Za-z_]+):[A-Z]+=(.*)$", (build / "CMakeCache.txt").read_text(), re.M))
    defines = [f"--config-settings=cmake.define.{k}={cache[k]}" for k in DEFINES_FROM_THE_BUILD if cache.get(k)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-q",
             "-w", tmp / "dist", f"--config-settings=build-dir={wheel_build}", *defines, source], env=env)
        wheels = list((tmp / "dist").glob("pinfeed-*.whl"))
        if len(wheels) != 1:
            fail(f"pip wheel made {[w.name for w in wheels]}, not one pinfeed wheel")
        with zipfile.ZipFile(wheels[0]) as z:
            metadata = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            requires = re.findall(r"^Requires-Dist: (.*)$", z.read(metadata).decode(), re.M)
        want = "torch==" + torch.__version__.split("+")[0]
        if requires != [want]:
            fail(f"the wheel requires {requires}, not [{want!r}]")

        # A fresh venv whose only view of torch is this Python's site-packages; no compiler, no index.
        fresh = tmp / "fresh"
        run([sys.executable, "-m", "venv", "--without-pip", fresh])
        fresh_py = fresh / "bin" / "python"
        site = pathlib.Path(run([fresh_py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
        torch_site = pathlib.Path(torch.__file__).parent.parent
        (site / "torch_site.pth").write_text(f"{torch_site}\n")
        no_compiler = dict(env, CC="false", CXX="false", PIP_NO_INDEX="1")
        run([sys.executable, "-m", "pip", "--python", fresh_py, "install", "--no-deps", "--no-index", "-q",
             wheels[0]], env=no_compiler)
        gen_data(exe, tmp / "data", 2, 4, 1, "48x48")
        out = run([fresh_py, "-c", f"""
import pinfeed
batches = list(pinfeed.ImageFolderLoader({str(tmp / 'data' / 'train')!r}, batch_size=4, image_size=32, device="cpu"))
print(pinfeed.__file__)
print(len(batches), tuple(batches[0][0].shape))
"""], cwd=tmp)
        where, shape = out.strip().splitlines()[-2:]
        if not where.startswith(str(site)):
            fail(f"pinfeed was imported from {where}, not from the fresh venv's {site}")
        if shape != "2 (4, 3, 32, 32)":
            fail(f"the installed wheel's loader gave {shape!r}, not 2 batches of (4, 3, 32, 32)")
    print(f"{wheels[0].name}: requires {want}; installed into a fresh venv without a compiler, it imports and loads")


main()
