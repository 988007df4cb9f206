"""docs/board.md states the protocol and register block the code defines."""

from pathlib import Path

import pytest

from syncfabric.hdl.common.bridge import SYNC_REQ, SYNC_RESP, crc8
from syncfabric.hdl.system.board import (
    SPACE_BOARD, SPACE_CSR, SPACE_MEM, board_address, board_regmap, board_registers_markdown)

DOC = Path(__file__).resolve().parents[2] / "docs" / "board.md"


def test_board_doc_holds_the_generated_register_table():
    table = board_registers_markdown().split("| address |", 1)[1]
    assert table in DOC.read_text(), "regenerate the table: python -m syncfabric.hdl.system.board"


def test_board_doc_states_the_frame_constants():
    text = DOC.read_text()
    assert f"`0x{SYNC_REQ:02X}` (sync)" in text and f"`0x{SYNC_RESP:02X}` (sync)" in text
    assert crc8(b"123456789") == 0xF4 and "0xF4" in text


def test_board_addresses_and_their_errors():
    assert board_address(SPACE_MEM, 0x10, 3) == 0x2300_0010
    assert board_address(SPACE_CSR, 0x8000, 1) == 0x1100_8000
    assert board_address(SPACE_BOARD, board_regmap().addr("CYCLES")) == 0x20
    with pytest.raises(ValueError, match="endpoint"):
        board_address(SPACE_CSR, 0, 16)
    with pytest.raises(ValueError, match="offset"):
        board_address(SPACE_MEM, 1 << 24)
    with pytest.raises(ValueError, match="space"):
        board_address(7, 0)
