"""The documentation's links and config paths point at files that exist.

Checked in ``README.md``, ``docs/**/*.md``, ``bench/*.md`` and ``configs/**/*.md``:

- every relative link or image (``[text](path)``, ``![alt](path)``, ``[ref]: path``, HTML
  ``src``/``href``) resolves, from the document's folder, to an existing file or folder; a
  ``#anchor`` into a Markdown file names one of its headings (GitHub's slugs);
- every ``configs/…`` path named anywhere in them, code included, exists from the repository
  root (``{a,b}`` alternatives and ``*`` globs expanded; paths with placeholders skipped).
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _documents() -> list[Path]:
    found = {ROOT / "README.md"} if (ROOT / "README.md").is_file() else set()
    for pattern in ("docs/**/*.md", "bench/*.md", "configs/**/*.md"):
        found.update(ROOT.glob(pattern))
    return sorted(found)


DOCUMENTS = _documents()

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s>]+(?:\([^()\s]*\)[^()\s>]*)*)>?"
    r"(?:\s+[\"'(][^)]*)?\)"
)
REF_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HTML_ATTR = re.compile(r"<(?:a|img|source)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
CONFIG_PATH = re.compile(r"(?<![\w./-])configs/[\w.{},*/-]*")
PLACEHOLDER = re.compile(r"[A-Z]{2,}|…|<|>")


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and code spans (links there are not links)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    """Every link target written in ``text`` (outside code)."""
    prose = _prose(text)
    return INLINE_LINK.findall(prose) + REF_DEFINITION.findall(prose) + HTML_ATTR.findall(prose)


def is_external(target: str) -> bool:
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) is not None or target.startswith("//")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: rendered text, lowercased, punctuation dropped,
    spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown document's headings (repeats get ``-1``, ``-2``, …)."""
    seen: dict[str, int] = {}
    out = set()
    for _, heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def expand_braces(path: str) -> list[str]:
    """``a/{b,c}.yaml`` → ``['a/b.yaml', 'a/c.yaml']`` (several groups multiply out)."""
    parts = re.split(r"\{([^{}]*)\}", path)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def config_paths(text: str) -> list[str]:
    """Every ``configs/…`` path named in ``text``, code included, without placeholders."""
    out = []
    for match in CONFIG_PATH.finditer(text):
        raw = match.group(0).rstrip(".,;:)")
        following = text[match.end() : match.end() + 1]
        if PLACEHOLDER.search(raw) or following in ("…", "<") or raw.count("{") != raw.count("}"):
            continue
        out.extend(expand_braces(raw))
    return out


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def test_the_documents_are_found():
    assert ROOT / "README.md" in DOCUMENTS
    assert len(DOCUMENTS) >= 3


@pytest.mark.parametrize("doc", DOCUMENTS, ids=_ids(DOCUMENTS))
def test_relative_links_resolve(doc: Path):
    text = doc.read_text(encoding="utf-8")
    broken = []
    for target in links(text):
        if is_external(target):
            continue
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / path_part).resolve() if path_part else doc
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and dest.is_file():
            if anchor.lower() not in anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{target} (no heading with that anchor)")
    assert not broken, f"{doc.relative_to(ROOT)}: broken links: {broken}"


@pytest.mark.parametrize("doc", DOCUMENTS, ids=_ids(DOCUMENTS))
def test_named_config_paths_exist(doc: Path):
    missing = [
        p
        for p in config_paths(doc.read_text(encoding="utf-8"))
        if not any(ROOT.glob(p)) and not (ROOT / p).exists()
    ]
    assert not missing, f"{doc.relative_to(ROOT)} names config paths that do not exist: {missing}"


# The checker itself: each helper against what it must find and what it must skip.


def test_links_are_found_outside_code_only():
    text = (
        'see [a](docs/a.md), ![pic](img/p.png "title") and [b](x.md#part)\n'
        '[ref]: other.md\n<img src="i.png"> `[not](a link)`\n'
        "```\n[also not](a link)\n```\n[web](https://example.org)"
    )
    assert links(text) == ["docs/a.md", "img/p.png", "x.md#part", "https://example.org", "other.md", "i.png"]


def test_github_slugs():
    assert slug("The low-rank bottleneck, measured") == "the-low-rank-bottleneck-measured"
    assert slug("[V17] Table 3 on Multi30k: rows A and B") == "v17-table-3-on-multi30k-rows-a-and-b"
    assert slug("`fullrank translate` options") == "fullrank-translate-options"
    assert slug("Multi30k En→De: every run") == "multi30k-ende-every-run"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_config_paths_are_expanded_and_placeholders_skipped():
    text = (
        "`configs/lm/ptb_{standard,fixed}.yaml`, configs/mt/table3/*.yaml and configs/mt. "
        "Not configs/NAME.yaml, configs/… nor ../configs/x.yaml or src/configs/y"
    )
    assert config_paths(text) == [
        "configs/lm/ptb_standard.yaml",
        "configs/lm/ptb_fixed.yaml",
        "configs/mt/table3/*.yaml",
        "configs/mt",
    ]
