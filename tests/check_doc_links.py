"""Every relative link of README.md and docs/*.md resolves: the file or folder exists in the repository, and an
anchor (after a page's name and "#", or "#" alone on the same page) is a heading of that page as GitHub names it
(lower case, punctuation but '-' and '_' dropped, spaces to '-', a repeated heading numbered -1, -2, ...). Links
inside code blocks and inline code are not links; http(s) and mailto links are not checked.

And every `docs/<page>.md` or `docs/<page>.md#anchor` that the rest of the tree cites (source comments and messages
in C++, CUDA, Python, shell, TOML and CMake files, the tests, configs and scripts) names a page that exists and a
heading it has.

Usage: check_doc_links.py REPO. Standard library only.
"""
import os
import pathlib
import re
import sys

from check_common import fail

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """The lines outside fenced code blocks, inline code removed."""
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield re.sub(r"`[^`]*`", "", line)


def anchors(path):
    """GitHub's anchor of each heading of a markdown file."""
    seen, out = {}, set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if not m:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2))  # a link's text
        slug = re.sub(r"[^\w\- ]", "", title.replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


# Files outside docs/ that may cite a page: by suffix, and CMake's by name. Folders never looked in: git's, build
# folders (a build tree holds copies of the sources) and docs/ itself (its links are checked above).
CITING = {".cpp", ".h", ".cu", ".cuh", ".py", ".sh", ".toml", ".txt", ".in", ".cmake"}
CITATION = re.compile(r"docs/([\w.-]+\.md)(?:#([\w-]+))?")


def citing_files(repo):
    for folder, dirs, files in os.walk(repo):
        here = pathlib.Path(folder)
        dirs[:] = sorted(d for d in dirs if not (d.startswith(".") or d.startswith("build") or
                                                  (here == repo and d == "docs")))
        for name in sorted(files):
            path = here / name
            if path.suffix in CITING or name == "CMakeLists.txt":
                yield path


def cited_anchors(repo):
    """Problems with the docs/<page>.md[#anchor] citations outside docs/, and how many there are."""
    problems, checked, cache = [], 0, {}
    for path in citing_files(repo):
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for page, anchor in CITATION.findall(line):
                checked += 1
                where = f"{path.relative_to(repo)}:{number}: docs/{page}{'#' + anchor if anchor else ''}"
                target = repo / "docs" / page
                if not target.exists():
                    problems.append(f"{where}: no such page")
                elif anchor:
                    if page not in cache:
                        cache[page] = anchors(target)
                    if anchor not in cache[page]:
                        problems.append(f"{where}: {page} has no heading with the anchor #{anchor}")
    return problems, checked


def main():
    repo = pathlib.Path(sys.argv[1]).resolve()
    pages = [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
    problems, checked = [], 0
    for page in pages:
        for number, line in enumerate(prose_lines(page.read_text()), 1):
            for target in LINK.findall(line):
                if re.match(r"^(https?|mailto):", target):
                    continue
                checked += 1
                path_part, _, anchor = target.partition("#")
                dest = (page.parent / path_part).resolve() if path_part else page
                name = f"{page.relative_to(repo)}: ({target})"
                if repo not in dest.parents and dest != repo:
                    problems.append(f"{name}: points outside the repository")
                elif not dest.exists():
                    problems.append(f"{name}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{name}: {dest.name} has no heading with the anchor #{anchor}")
    cited, cited_checked = cited_anchors(repo)
    if problems or cited:
        fail(f"{len(problems)} of {checked} links in the pages and {len(cited)} of {cited_checked} citations of a "
             "page elsewhere do not resolve:\n  " + "\n  ".join(problems + cited))
    print(f"ok: {checked} links in {len(pages)} pages, {cited_checked} citations of a page in the rest of the tree")


if __name__ == "__main__":
    main()
