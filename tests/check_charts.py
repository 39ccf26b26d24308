"""The charts of scripts/plot_parity.py and scripts/plot_bench.py read as their tables do: every seed of a parity
run its own colour (the same on both sides), and bench bars labelled with their values on a logarithmic axis when
the rows differ by orders of magnitude.

Usage: check_charts.py REPO. Exits 77 (ctest: skipped) without matplotlib.
"""
import importlib.util
import pathlib
import sys
import tempfile

from check_common import skip_without


def script(repo, name):
    spec = importlib.util.spec_from_file_location(name, repo / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_row(mode, median):
    return {"label": "pinfeed", "mode": mode, "samples_per_s": [median * 0.98, median, median * 1.01],
            "samples_per_s_median": median}


def main():
    repo = pathlib.Path(sys.argv[1])
    with skip_without():
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.colors
    parity, bench = script(repo, "plot_parity"), script(repo, "plot_bench")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        rows = [{"epoch": e, "val_top1": 0.1 * e, "train_loss": 2.0 / e} for e in (1, 2, 3)]
        seeds = ["0", "1", "2", "3"]
        runs = [(f"pinfeed seed {s}", rows) for s in seeds] + [(f"torchvision seed {s}", rows) for s in seeds]
        fig = parity.chart(runs, tmp / "parity.png", "title")
        lines = fig.axes[0].get_lines()
        colours = [matplotlib.colors.to_hex(line.get_color()) for line in lines]
        assert len(set(colours[:4])) == 4, f"four seeds, {len(set(colours[:4]))} colours: {colours}"
        assert colours[:4] == colours[4:], f"a seed's colour differs between the sides: {colours}"
        assert [line.get_linestyle() for line in lines] == ["-"] * 4 + ["--"] * 4
        print(f"plot_parity.py: 4 seeds in 4 colours {colours[:4]}, the same on both sides")

        wide = [bench_row("pageable", 9.0), bench_row("dual_stream", 24841.0), bench_row("gpu_resident", 25000.0)]
        fig = bench.chart("cfg", wide, tmp / "wide.png")
        ax = fig.axes[0]
        assert ax.get_yscale() == "log", ax.get_yscale()
        shown = sorted(t.get_text() for t in ax.texts)
        assert shown == sorted(["9", "24,841", "25,000"]), shown
        narrow = [bench_row("pageable", 6000.0), bench_row("dual_stream", 7500.0)]
        assert bench.chart("cfg", narrow, tmp / "narrow.png").axes[0].get_yscale() == "linear"
        print("plot_bench.py: bars labelled with their medians; a log axis for 9 beside 24,841, linear for 6,000 "
              "beside 7,500")
    return 0


if __name__ == "__main__":
    sys.exit(main())
