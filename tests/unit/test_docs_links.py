"""The documentation holds together: every relative link in README.md and docs/*.md reaches a
file (and, with a #fragment, a heading of it), every "docs/FILE.md section N" that code, tests
or docs cite names a numbered heading that exists, and the README's Development layout matches
the tree; every test the docs name exists. Each checker is also run on a deliberately broken
example, so it is shown to fail."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LINK = re.compile(r"\[(?:[^\]\\]|\\.)*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
NUMBERED = re.compile(r"^##\s+(\d+)\.\s")
# "docs/design.md section 5" anywhere; inside docs/ also "design.md section 5".
SECTION_REF = re.compile(r"(?<![\w/.-])(docs/)?([\w-]+\.md) section (\d+)")
LAYOUT_PATH = re.compile(r"^((?:effectusd|schema|contrib|docs|tests)/[\w./-]*)")


def markdown_lines(text: str) -> Iterable[str]:
    """The lines outside fenced code blocks (links and headings inside them mean nothing)."""
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces → '-'."""
    text = re.sub(r"`|\*\*|\*|\[|\]\([^)]*\)", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in markdown_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def numbered_sections(path: Path) -> set[int]:
    text = path.read_text(encoding="utf-8")
    return {int(m.group(1)) for line in markdown_lines(text) if (m := NUMBERED.match(line))}


def broken_links(doc: Path, root: Path) -> list[str]:
    problems = []
    for line in markdown_lines(doc.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, fragment = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            where = f"{doc.relative_to(root)}: {target}"
            if not dest.exists():
                problems.append(f"{where}: no such file")
            elif fragment and (dest.suffix != ".md" or fragment not in anchors(dest)):
                problems.append(f"{where}: no such heading")
    return problems


def broken_section_refs(source: Path, root: Path) -> list[str]:
    problems = []
    in_docs = source.parent.name == "docs"
    for match in SECTION_REF.finditer(source.read_text(encoding="utf-8")):
        prefixed, name, number = match.group(1), match.group(2), int(match.group(3))
        if not prefixed and not in_docs:
            continue  # "README.md section" and the like are not references into docs/
        target = root / "docs" / name
        where = f"{source.relative_to(root)}: {match.group(0)}"
        if not target.exists():
            problems.append(f"{where}: no such file")
        elif number not in numbered_sections(target):
            problems.append(f"{where}: no section {number}")
    return problems


def layout_problems(readme: Path, root: Path) -> list[str]:
    """Every path the Development layout names exists, and every package folder is named."""
    text = readme.read_text(encoding="utf-8")
    block = text.split("## Development", 1)[1].split("```")[1]
    listed = [m.group(1) for line in block.splitlines() if (m := LAYOUT_PATH.match(line))]
    problems = [
        f"layout names {path}, which does not exist"
        for path in listed
        if not (root / path).exists()
    ]
    named = {path.rstrip("/,") for path in listed}
    for folder in sorted((root / "effectusd").glob("*/")) + sorted(
        (root / "effectusd").glob("*/*/")
    ):
        if folder.is_dir() and folder.name != "__pycache__":
            relative = folder.relative_to(root).as_posix()
            if relative not in named:
                problems.append(f"layout does not name {relative}/")
    return problems


def docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def citing_files() -> list[Path]:
    sources = [*docs()]
    for folder in ("effectusd", "tests"):
        sources += [
            p for p in sorted((ROOT / folder).rglob("*.py")) if p != Path(__file__).resolve()
        ]
    return sources


def test_every_relative_link_in_the_docs_resolves() -> None:
    problems = [problem for doc in docs() for problem in broken_links(doc, ROOT)]
    assert problems == []


def test_every_docs_section_reference_names_an_existing_numbered_section() -> None:
    sources = citing_files()
    problems = [problem for source in sources for problem in broken_section_refs(source, ROOT)]
    assert problems == []
    # The code does cite the docs (so this test checks something real).
    assert any("docs/design.md section" in p.read_text(encoding="utf-8") for p in sources)


def numbering_gaps(path: Path) -> list[str]:
    """Where a document's numbered sections (## N. Title) do not run 1, 2, 3, … in order."""
    text = path.read_text(encoding="utf-8")
    numbers = [int(m.group(1)) for line in markdown_lines(text) if (m := NUMBERED.match(line))]
    return [
        f"{path.name}: section {number} where {expected} is due"
        for expected, number in enumerate(numbers, start=1)
        if number != expected
    ][:1]


def test_every_doc_numbers_its_sections_from_one_without_a_gap() -> None:
    assert [gap for doc in docs() for gap in numbering_gaps(doc)] == []


def test_the_development_layout_matches_the_tree() -> None:
    assert layout_problems(ROOT / "README.md", ROOT) == []


def test_the_checkers_find_broken_links_references_and_layouts(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "effectusd" / "core").mkdir(parents=True)
    (tmp_path / "effectusd" / "store").mkdir()
    (tmp_path / "docs" / "design.md").write_text("# Design\n\n## 1. Identities\n\nText.\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# x\n\n"
        "[ok](docs/design.md#1-identities) [gone](docs/missing.md) "
        "[bad anchor](docs/design.md#2-states) [web](https://example.org/x)\n\n"
        "```\n[inside a code block](nowhere.md)\n```\n\n"
        "## Development\n\n```\neffectusd/core/   pure\neffectusd/cli/    gone\n```\n"
    )
    code = tmp_path / "effectusd" / "core" / "mod.py"
    code.write_text(
        '"""See docs/design.md section 1, docs/design.md section 7, docs/nope.md section 1."""\n'
    )

    assert broken_links(readme, tmp_path) == [
        "README.md: docs/missing.md: no such file",
        "README.md: docs/design.md#2-states: no such heading",
    ]
    assert broken_section_refs(code, tmp_path) == [
        "effectusd/core/mod.py: docs/design.md section 7: no section 7",
        "effectusd/core/mod.py: docs/nope.md section 1: no such file",
    ]
    assert layout_problems(readme, tmp_path) == [
        "layout names effectusd/cli/, which does not exist",
        "layout does not name effectusd/store/",
    ]
    (tmp_path / "docs" / "gaps.md").write_text("# G\n\n## 1. A\n\n## 2. B\n\n## 4. D\n")
    assert numbering_gaps(tmp_path / "docs" / "gaps.md") == ["gaps.md: section 4 where 3 is due"]
    assert numbering_gaps(tmp_path / "docs" / "design.md") == []


def test_every_test_the_docs_name_exists() -> None:
    defined = set()
    for source in (ROOT / "tests").rglob("*.py"):
        defined |= set(re.findall(r"^\s*(?:async )?def (test_\w+)", source.read_text(), re.M))
    named = {name for doc in docs() for name in re.findall(r"`(test_\w+)`", doc.read_text())}
    assert named, "the docs name the tests that prove each promise"
    assert sorted(named - defined) == []


def test_slugs_follow_github() -> None:
    assert slug("2. The runbook: blocked sagas") == "2-the-runbook-blocked-sagas"
    assert slug("4. Plans, verbs and checking") == "4-plans-verbs-and-checking"
    assert slug("Evidence: the `chaos` suite") == "evidence-the-chaos-suite"
