"""The wheel's requirement on torch: the very version this build compiles against (LibTorch has no stable C++ ABI;
pinfeed/__init__.py refuses any other at import). scikit-build-core asks it for `dependencies`
(pyproject.toml: tool.scikit-build.metadata). The torch is the one CMakeLists.txt builds against: that of the Python
running the build, its own site-packages, which pip's isolated build hides but `python -I` sees."""
import subprocess
import sys


def dynamic_metadata(field, settings=None, project=None):
    if field != "dependencies":
        raise RuntimeError(f"torch_requirement provides dependencies, not {field}")
    r = subprocess.run([sys.executable, "-I", "-c", "import torch; print(torch.__version__)"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError(f"torch is not importable by {sys.executable}: install torch first\n{r.stderr}")
    version = r.stdout.strip().split("+")[0]  # 2.11.0+cu130 -> 2.11.0: any local build of that release
    return [f"torch=={version}"]
