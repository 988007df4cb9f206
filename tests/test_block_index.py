"""The block index of docs/architecture.md ("## Block index") is in step with the tree.

Every path the table names exists, every module under hdl/ (``__init__.py`` aside) is in the RTL column of some
row, every row names a test file, and the doc column's numbered sections and quoted headings are in the pages
it names. Plain text checks: nothing is imported or simulated.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
HEADER = ["block", "RTL", "golden model", "tests", "doc section"]

_CODE = re.compile(r"`([^`]+)`")
_PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)*/?")
_SECTIONS = re.compile(r"\bsections?\s+(\d+(?:\s*(?:,|and)\s*\d+)*)")
_QUOTED = re.compile(r'"([^"]+)"')


def _section(text, heading):
    """The lines of the ``## heading`` section of ``text`` (up to the next ``## `` heading)."""
    lines = text.splitlines()
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start + 1:end]


def _cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def block_rows():
    """The block index as ``[{column: cell}]``, one dict per table row."""
    table = [ln for ln in _section(DOC.read_text(), "## Block index") if ln.startswith("|")]
    assert len(table) > 2, "docs/architecture.md: no table in the section '## Block index'"
    assert _cells(table[0]) == HEADER, f"block index header is {_cells(table[0])}, expected {HEADER}"
    assert set(table[1]) <= set("|-: "), "block index: the second line is not the table's separator row"
    rows = []
    for line in table[2:]:
        cells = _cells(line)
        assert len(cells) == len(HEADER), f"block index row has {len(cells)} cells, not {len(HEADER)}: {line}"
        rows.append(dict(zip(HEADER, cells)))
    return rows


def paths(cell):
    """The repository paths a cell names: backquoted files ending in .py or .md, or anything with a slash."""
    return [c for c in _CODE.findall(cell)
            if _PATH.fullmatch(c) and ("/" in c or c.endswith((".py", ".md")))]


def hdl_modules():
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "hdl").rglob("*.py") if p.name != "__init__.py")


def test_every_path_in_the_block_index_exists():
    missing = [f"{p} (row '{row['block']}', column '{col}')"
               for row in block_rows() for col in HEADER for p in paths(row[col]) if not (ROOT / p).exists()]
    assert not missing, "docs/architecture.md block index names paths that do not exist:\n" + "\n".join(missing)


def test_every_hdl_module_is_in_the_rtl_column():
    listed = {p for row in block_rows() for p in paths(row["RTL"])}
    missing = [m for m in hdl_modules() if m not in listed]
    assert not missing, "hdl modules missing from the RTL column of the block index:\n" + "\n".join(missing)
    not_rtl = sorted(p for p in listed if not (p.startswith("hdl/") and p.endswith(".py")))
    assert not not_rtl, "the RTL column names files that are not hdl modules:\n" + "\n".join(not_rtl)


def test_every_row_names_a_test_file():
    untested = [row["block"] for row in block_rows()
                if not any(p.startswith("tests/") and p.endswith(".py") for p in paths(row["tests"]))]
    assert not untested, "block index rows without a test file under tests/:\n" + "\n".join(untested)


def test_doc_sections_named_in_the_block_index_exist():
    """``docs/x.md section N`` needs a ``## N.`` heading in that page, ``docs/x.md "Name"`` a heading holding
    the name."""
    wrong = []
    for row in block_rows():
        cell = row["doc section"]
        for part in re.split(r"(?=`docs/[\w./-]+\.md`)", cell):
            page = _CODE.match(part)
            if not page:
                continue
            path = ROOT / page.group(1)
            if not path.exists():
                continue            # reported by test_every_path_in_the_block_index_exists
            headings = [ln for ln in path.read_text().splitlines() if ln.startswith("#")]
            for numbers in _SECTIONS.findall(part):
                for n in re.findall(r"\d+", numbers):
                    if not any(re.match(rf"#+ {n}\.\s", h) for h in headings):
                        wrong.append(f"{page.group(1)} section {n} (row '{row['block']}')")
            for name in _QUOTED.findall(part):
                if not any(name in h for h in headings):
                    wrong.append(f'{page.group(1)} "{name}" (row \'{row["block"]}\')')
    assert not wrong, "block index doc sections not found:\n" + "\n".join(wrong)
