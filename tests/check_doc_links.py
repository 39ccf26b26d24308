"""Every relative link of README.md and docs/*.md resolves: the file or folder exists in the repository, and an
anchor (after a page's name and "#", or "#" alone on the same page) is a heading of that page as GitHub names it
(lower case, punctuation but '-' and '_' dropped, spaces to '-', a repeated heading numbered -1, -2, ...). Links
inside code blocks and inline code are not links; http(s) and mailto links are not checked.

Usage: check_doc_links.py REPO. Standard library only.
"""
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
    if problems:
        fail(f"{len(problems)} of {checked} links do not resolve:\n  " + "\n  ".join(problems))
    print(f"ok: {checked} links in {len(pages)} pages")


if __name__ == "__main__":
    main()
