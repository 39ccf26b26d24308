"""What the tests/check_*.py scripts share: the failure line, the skip (exit 77, which tests/CMakeLists.txt gives
ctest as SKIP_RETURN_CODE) when a module they need is not importable, and pinfeed gen-data's small image folders.
A table of a doc is read by its header line (doc_table).
The scripts run as `python tests/check_x.py ...`, so this module is importable beside them. Standard library only.
"""
import contextlib
import subprocess
import sys

SKIPPED = 77


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


@contextlib.contextmanager
def skip_without(hint=""):
    """An import in the with-block that fails exits 77 (skipped) with one line saying what is missing, and the hint."""
    try:
        yield
    except ImportError as e:
        what = f"{e.name} is not importable" if isinstance(e, ModuleNotFoundError) else str(e)
        print(f"{what}{f' ({hint})' if hint else ''}: skipped")
        sys.exit(SKIPPED)


def doc_table(path, header):
    """The cells of each row of the markdown table in file `path` whose header line starts with `header` (the
    separator line left out; a table indented under a list item too); fails when the file has no such table."""
    lines = [line.lstrip() for line in path.read_text().splitlines()]
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    if start is None:
        fail(f"{path.name}: no table headed {header!r}")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def gen_data(exe, out, classes, train_per_class, val_per_class, size, *flags):
    """pinfeed gen-data into out (one thread), with any more flags; its output is shown only when it fails."""
    r = subprocess.run([str(exe), "gen-data", "--out", str(out), "--classes", str(classes), "--train-per-class",
                        str(train_per_class), "--val-per-class", str(val_per_class), "--size", size, "--threads", "1",
                        *flags], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"gen-data: exit {r.returncode}\n{r.stdout}{r.stderr}")


def tiny_config(path, data, runs, batch_size, name="", image_size=32, data_lines="", model_lines="", train_lines=""):
    """A one-epoch fp32 training config on the CPU for the folder `data` into `runs`, written to `path` (returned);
    the *_lines, more `key = value` lines of their sections."""
    path.write_text(
        f'[data]\nroot = "{data}"\nimage_size = {image_size}\nworkers = 1\n{data_lines}'
        + (f"[model]\n{model_lines}" if model_lines else "")
        + f'[train]\ndevice = "cpu"\nepochs = 1\nbatch_size = {batch_size}\nlr = 0.01\nprecision = "fp32"\n{train_lines}'
        + f'[pipeline]\nwarmup_steps = 0\n[run]\n' + (f'name = "{name}"\n' if name else "") + f'dir = "{runs}"\n')
    return path
