"""No include points up: the rooms' order is the order the build lists them, lowest first, and a room includes
only from itself and the rooms before it.

- The top rooms: the top CMakeLists.txt's add_subdirectory order (common, gpu, data, pipeline, model, engine, app,
  python); tests/ and benchmarks/ may include any room.
- The rooms inside app/, engine/ and pipeline/: the order their sub-folders first appear in that folder's
  CMakeLists.txt. A file directly in the folder (engine/files.h, pipeline/resolve_feed.h, app/main.cpp) belongs
  to no sub-room: it may include any of them, and any of them may include it.

Usage: check_layers.py REPO. Standard library only.
"""
import pathlib
import re
import sys

from check_common import fail

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = (".h", ".cpp", ".cu", ".cuh")
ANYTHING_GOES = {"tests", "benchmarks"}
INNER = ("app", "engine", "pipeline")


def top_order(repo):
    text = (repo / "CMakeLists.txt").read_text()
    return [r for r in re.findall(r"add_subdirectory\((\w+)", text) if r not in ANYTHING_GOES]


def inner_order(repo, room):
    text = re.sub(r"#[^\n]*", "", (repo / room / "CMakeLists.txt").read_text())
    order = []
    for sub in re.findall(r"\b([a-z_]+)/[\w/]+\.(?:cpp|cu)\b", text):
        if sub not in order:
            order.append(sub)
    return order


def main(repo):
    repo = pathlib.Path(repo)
    top = top_order(repo)
    inner = {room: inner_order(repo, room) for room in INNER}
    problems = []
    for room in top:
        for path in sorted((repo / room).rglob("*")):
            if path.suffix not in SOURCES:
                continue
            rel = path.relative_to(repo).parts
            sub = rel[1] if room in inner and len(rel) > 2 else None
            for target in INCLUDE.findall(path.read_text(errors="replace")):
                parts = target.split("/")
                if len(parts) < 2 or parts[0] not in top:
                    continue
                if top.index(parts[0]) > top.index(room):
                    problems.append(f"{path.relative_to(repo)} includes {target}: {parts[0]}/ is above {room}/")
                elif parts[0] == room and sub and len(parts) > 2 and parts[1] in inner[room]:
                    if sub not in inner[room]:
                        problems.append(f"{path.relative_to(repo)}: {room}/{sub}/ is not in {room}/CMakeLists.txt")
                    elif inner[room].index(parts[1]) > inner[room].index(sub):
                        problems.append(f"{path.relative_to(repo)} includes {target}: {room}/{parts[1]}/ is above "
                                        f"{room}/{sub}/ in {room}/CMakeLists.txt")
    if problems:
        fail(f"{len(problems)} include(s) point up:\n  " + "\n  ".join(problems))
    print("rooms, lowest first: " + " < ".join(top) + "; " +
          "; ".join(f"{r}/: " + " < ".join(inner[r]) for r in INNER))


if __name__ == "__main__":
    main(sys.argv[1])
