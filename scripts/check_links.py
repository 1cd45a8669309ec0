#!/usr/bin/env python3
"""Checks the links of the README, the book's sources and the measurement reports.

Every relative link must name a file or folder of the repository, and a `#anchor` must name a
heading of its Markdown page (its id computed as mdBook computes it, which GitHub's agrees
with for these pages), or a line (`#L12`) of another file. External links are not fetched:
they must only be well formed. Every page under docs/src must be listed in SUMMARY.md, or the
book leaves it out. Where the book is built (docs/book, by `mdbook build docs`), the links of
its HTML pages are checked too, as a browser follows them. Prints each broken link with its
file and line, and exits 1 if any.

Usage: python3 scripts/check_links.py  (from anywhere; standard library only)
"""

import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
BOOK_SOURCE = ROOT / "docs" / "src"
BOOK_OUTPUT = ROOT / "docs" / "book"
TOP_LEVEL = ["README.md", "BENCHMARKS.md", "RELIABILITY.md"]

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+).*?\1")
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"  # the text, one level of brackets inside
    r"\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)"  # the target and an optional title
)
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ATTRIBUTE = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CUSTOM_ID = re.compile(r"\{#([^}\s]+)[^}]*\}\s*$")
LINE_ANCHOR = re.compile(r"^L\d+(-L\d+)?$")


def pages():
    """The Markdown files whose links are checked."""
    found = [ROOT / name for name in TOP_LEVEL if (ROOT / name).exists()]
    found += sorted(BOOK_SOURCE.rglob("*.md"))
    return found


def prose_lines(text, blank_code=True):
    """(line number, line) of the lines outside fenced code, code spans blanked unless
    `blank_code` is false."""
    fenced = None
    for number, line in enumerate(text.splitlines(), start=1):
        opening = FENCE.match(line)
        if fenced:
            if opening and opening.group(1) == fenced:
                fenced = None
            continue
        if opening:
            fenced = opening.group(1)
            continue
        yield number, CODE_SPAN.sub("", line) if blank_code else line


def heading_text(raw):
    """A heading's text as it is rendered: links to their text, code and emphasis unmarked."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "").replace("*", "")


def heading_id(text):
    """mdBook's id for a heading: alphanumerics, `_` and `-` kept (lowercased), each space a
    `-`, the rest dropped."""
    kept = []
    for character in heading_text(text):
        if character.isalnum() or character in "_-":
            kept.append(character.lower())
        elif character.isspace():
            kept.append("-")
    return "".join(kept)


def anchors(path, cache={}):
    """Every heading id of a Markdown page, repeats numbered as mdBook numbers them."""
    if path not in cache:
        ids, seen = set(), {}
        for _, line in prose_lines(path.read_text(encoding="utf-8"), blank_code=False):
            heading = HEADING.match(line)
            if not heading:
                continue
            text = heading.group(2)
            custom = CUSTOM_ID.search(text)
            if custom:
                ids.add(custom.group(1))
                continue
            base = heading_id(text)
            count = seen.get(base, 0)
            seen[base] = count + 1
            ids.add(base if count == 0 else f"{base}-{count}")
        cache[path] = ids
    return cache[path]


def links(path):
    """(line number, target) of every link of a page."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for pattern in (INLINE_LINK, HTML_ATTRIBUTE):
            for match in pattern.finditer(line):
                yield number, match.group(1)
        definition = REFERENCE_DEFINITION.match(line)
        if definition:
            yield number, definition.group(1)


def external_problem(target):
    parts = urlsplit(target)
    if parts.scheme in ("http", "https"):
        if not parts.netloc or " " in target or parts.netloc.startswith("."):
            return "not a well-formed URL"
        return None
    if parts.scheme == "mailto":
        return None if "@" in target else "not a well-formed address"
    return f"unknown scheme {parts.scheme!r}"


def relative_problem(page, target):
    """What is wrong with a relative link from `page`, or None."""
    path_part, _, anchor = target.partition("#")
    destination = page if not path_part else (page.parent / unquote(path_part)).resolve()
    if ROOT not in destination.parents and destination != ROOT:
        return "points outside the repository"
    if not destination.exists():
        return f"no such file: {destination.relative_to(ROOT)}"
    in_book = BOOK_SOURCE in page.resolve().parents
    outside_book = BOOK_SOURCE not in destination.parents
    if in_book and path_part.endswith(".md") and outside_book:
        # mdBook makes every `.md` link `.html` (HTML ones too), which exists only for the
        # book's own pages; `%2E` for the dot reads the same to a browser and to GitHub.
        return "a Markdown file outside the book: write its dot as %2E (mdBook makes .md .html)"
    if not anchor:
        return None
    if destination.suffix == ".md":
        if anchor not in anchors(destination):
            return f"no heading #{anchor} in {destination.relative_to(ROOT)}"
        return None
    if destination.is_file() and LINE_ANCHOR.match(anchor):
        return None
    return f"cannot check #{anchor} in {destination.relative_to(ROOT)}"


def unlisted_pages():
    """Pages under docs/src that SUMMARY.md does not list (the book would leave them out)."""
    summary = BOOK_SOURCE / "SUMMARY.md"
    if not summary.exists():
        return []
    listed = {
        (summary.parent / unquote(target.partition("#")[0])).resolve()
        for _, target in links(summary)
        if "://" not in target
    }
    return [
        page
        for page in sorted(BOOK_SOURCE.rglob("*.md"))
        if page != summary and page.resolve() not in listed
    ]


def built_book_problems():
    """The broken relative links of the built book (docs/book, when `mdbook build docs` made
    it): each page's own content, its target file and `#anchor` as the browser would find them."""
    problems, checked = [], 0
    if not BOOK_OUTPUT.is_dir():
        return problems, checked
    for html in sorted(BOOK_OUTPUT.rglob("*.html")):
        text = html.read_text(encoding="utf-8")
        content = text[text.find("<main>") : text.find("</main>")]
        for target in re.findall(r'href="([^"]+)"', content):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue
            checked += 1
            path_part, _, anchor = target.partition("#")
            destination = html if not path_part else (html.parent / unquote(path_part)).resolve()
            where = f"{html.relative_to(ROOT)}: {target}"
            if not destination.exists():
                problems.append(f"{where}: no such file in the built book")
            elif anchor and destination.suffix == ".html":
                if f'id="{anchor}"' not in destination.read_text(encoding="utf-8"):
                    problems.append(f"{where}: no #{anchor} there")
    return problems, checked


def main():
    broken, checked = [], 0
    for page in pages():
        for number, target in links(page):
            checked += 1
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                problem = external_problem(target)
            else:
                problem = relative_problem(page, target)
            if problem:
                broken.append(f"{page.relative_to(ROOT)}:{number}: {target}: {problem}")
    for page in unlisted_pages():
        broken.append(f"{page.relative_to(ROOT)}: not listed in docs/src/SUMMARY.md")
    built_broken, built_checked = built_book_problems()
    broken += built_broken
    checked += built_checked
    if broken:
        print(f"{len(broken)} broken link(s) of {checked}:", file=sys.stderr)
        for line in broken:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(
        f"{checked} links checked in {len(pages())} pages"
        f" ({built_checked} of them in the built book): none broken"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
