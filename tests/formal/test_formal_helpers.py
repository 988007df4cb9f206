"""The formal helpers themselves: the source mutants and the ABC witness bridge (no solver needed)."""

import pytest

import abc_compat
from formal_helpers import mutant
from syncfabric.hdl.common.skid import SkidBuffer


def test_mutant_refuses_a_snippet_that_is_not_in_the_source_exactly_once():
    # a mutant whose snippet went away with a source change would silently be the real block
    with pytest.raises(ValueError, match="occurs 0 times"):
        mutant(SkidBuffer, "no such code", "x")
    with pytest.raises(ValueError, match="occurs [2-9] times"):
        mutant(SkidBuffer, "m.d.sync +=", "x")


def test_mutant_replaces_the_snippet_in_a_subclass():
    cls = mutant(SkidBuffer, "self.i.ready.eq(~skid_valid)", "self.i.ready.eq(1)")
    assert issubclass(cls, SkidBuffer) and cls.elaborate is not SkidBuffer.elaborate
    assert "self.i.ready.eq(1)" in cls.__doc__


def test_abc_witness_of_the_older_abc_is_rewritten_to_the_standard_form(tmp_path):
    path = tmp_path / "trace.aiw"
    path.write_text("00000\n001\n010\n000# DONE")       # what Debian's yosys-abc writes
    abc_compat._fix_witness(str(path))
    assert path.read_text() == "1\nb0\n00000\n001\n010\n000\n.\n"
    abc_compat._fix_witness(str(path))                  # the standard form is left alone
    assert path.read_text() == "1\nb0\n00000\n001\n010\n000\n.\n"
