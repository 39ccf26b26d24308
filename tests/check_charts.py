"""The charts of scripts/tables.py read as their tables do: in the accuracy-parity chart and in the time-to-accuracy
chart every seed has its own colour, the same on both sides, pinfeed solid and the other side dashed.

Usage: check_charts.py REPO. Exits 77 (ctest: skipped) without matplotlib.
"""
import pathlib
import sys
import tempfile

from check_common import skip_without


def main():
    repo = pathlib.Path(sys.argv[1])
    with skip_without():
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.colors
    sys.path.insert(0, str(repo / "scripts"))
    import tables  # parity's chart
    import tables_runs  # tta's
    hexes = lambda lines: [matplotlib.colors.to_hex(line.get_color()) for line in lines]  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        rows = [{"epoch": e, "val_top1": 0.1 * e, "train_loss": 2.0 / e} for e in (1, 2, 3)]
        seeds = ["0", "1", "2", "3"]
        runs = [(f"pinfeed seed {s}", rows) for s in seeds] + [(f"torchvision seed {s}", rows) for s in seeds]
        lines = tables.parity_chart(runs, tmp / "parity.png", "title").axes[0].get_lines()
        colours = hexes(lines)
        assert len(set(colours[:4])) == 4, f"four seeds, {len(set(colours[:4]))} colours: {colours}"
        assert colours[:4] == colours[4:], f"a seed's colour differs between the sides: {colours}"
        assert [line.get_linestyle() for line in lines] == ["-"] * 4 + ["--"] * 4
        print(f"tables.py parity: 4 seeds in 4 colours {colours[:4]}, the same on both sides")

        curve = {"wall": [10.0, 20.0, 30.0], "top1": [0.5, 0.7, 0.8]}
        res = {"curves": [{"seed": s, "pinfeed": curve, "python": curve} for s in seeds], "target_top1": 0.75,
               "clock": {"pinfeed": ["from launch (timed_run.py)"], "python": ["from launch (timed_run.py)"]}}
        lines = tables_runs.tta_chart(res, tmp / "tta.png", "title").axes[0].get_lines()[:8]  # the target's line last
        colours = hexes(lines)
        assert len(set(colours[0::2])) == 4, f"four seeds, {len(set(colours[0::2]))} colours: {colours}"
        assert colours[0::2] == colours[1::2], f"a seed's colour differs between the sides: {colours}"
        assert [line.get_linestyle() for line in lines] == ["-", "--"] * 4
        print(f"tables.py tta: 4 seeds in 4 colours {colours[0::2]}, the same on both sides")
    return 0


if __name__ == "__main__":
    sys.exit(main())
