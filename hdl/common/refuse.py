"""Elaboratables that check their arguments before they exist.

Amaranth warns (``UnusedElaboratable``) about an elaboratable created and never elaborated, which is what a
constructor that raises on bad arguments leaves behind. :class:`Checked` runs the class's :meth:`check`
in ``__new__``, before the object exists, so a refused design never becomes an unused one; the constructor
then runs on arguments known to be good.
"""

__all__ = ["Checked"]


class Checked:
    """Mixin placed before the Amaranth base (``class Switch(Checked, wiring.Component)``): ``check`` (a
    classmethod, given the constructor's arguments) raises for arguments the constructor refuses."""

    def __new__(cls, *args, src_loc_at=0, **kwargs):
        cls.check(*args, **kwargs)
        # one frame more between the caller and Amaranth's MustUse: its warnings still name the caller
        return super().__new__(cls, *args, src_loc_at=src_loc_at + 1, **kwargs)

    @classmethod
    def check(cls, *args, **kwargs):
        """Raise ``ValueError`` naming what is wrong with the constructor's arguments (default: nothing)."""
