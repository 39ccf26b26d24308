"""The training step's current table in docs/training-step.md against its raw runs: every cell (median [min-max])
and ratio of each row comes out of docs/data/training-step/step-reduce-overhead.json, the run its last cell names.

Usage: check_step_table.py REPO_ROOT.
"""
import json
import pathlib
import sys

from check_common import doc_table, fail


def main():
    repo = pathlib.Path(sys.argv[1])
    sys.path.insert(0, str(repo / "scripts"))
    from tables_bench import step_cell as cell  # how bench_step.sh's tables write a row's samples/s
    runs = json.loads((repo / "docs" / "data" / "training-step" / "step-reduce-overhead.json").read_text())["runs"]
    table = doc_table(repo / "docs" / "training-step.md", "| px | precision | pinfeed | `torch.compile` `reduce-overhead`")
    if len(table) != len(runs):
        fail(f"{len(table)} rows in the current table, {len(runs)} runs in the raw file")
    for cells in table:
        key = cells[-1].strip("`")
        if key not in runs:
            fail(f"row names run {key!r}, not in the raw file")
        rows = runs[key]["rows"]
        find = lambda prefix: next((r for r in rows if r["label"].startswith(prefix)), None)  # noqa: E731
        pinfeed, ro = find("pinfeed"), find("torchvision + torch.compile reduce-overhead")
        default = find("torchvision + torch.compile,")
        px, precision = cells[0], cells[1]
        if px != str(pinfeed["image_size"]) or precision != pinfeed["precision"]:
            fail(f"{key}: side/precision {px}/{precision} against {pinfeed['image_size']}/{pinfeed['precision']}")
        leader = pinfeed["median"] > ro["median"]  # the doc bolds the leader's median
        want = [cell(pinfeed).replace(f"{pinfeed['median']:,.0f}", f"**{pinfeed['median']:,.0f}**", 1) if leader
                else cell(pinfeed), cell(ro), cell(default) if default else ""]
        if cells[2:5] != want:
            fail(f"{key}: cells {cells[2:5]} against the raw {want}")
        ratio = f"{pinfeed['median'] / ro['median']:.2f}x"
        if ratio not in cells[5]:
            fail(f"{key}: pinfeed / reduce-overhead {cells[5]!r} against the raw {ratio}")
        if default and f"{pinfeed['median'] / default['median']:.2f}x" != cells[6]:
            fail(f"{key}: pinfeed / default {cells[6]!r} against the raw {pinfeed['median'] / default['median']:.2f}x")
    print("ok")


if __name__ == "__main__":
    main()
