"""Verilator hierarchical blocks built once per content and shared by every design that instantiates them.

Verilator's ``--hierarchical`` mode compiles a block (the engine) into a library of its own, but inside each
design's build: two system tops that differ only in their topology, NPU memory size or link cuts each
Verilate the same engine again (about 85 s for a `small` engine, 37 minutes for a `paper` one). Here the
block is cut out of the design's Verilog (the module ``B`` and every ``\\B.*`` submodule, as Amaranth names
them), Verilated and compiled into ``<cache>/B-<key>/`` once per (block text, flags, Verilator version), and
each design's top is Verilated against the block's wrapper and linked with its library: the same Verilator
commands as ``--hierarchical`` runs (the block with ``--lib-create --hierarchical-child``, the top with
``--hierarchical-block``), in two steps instead of one.

The cache (:func:`block_cache`) is the user's (``~/.cache/syncfabric/verilator-blocks``), shared by every
clone and build directory on the machine, as ccache shares the C++ objects: a block is a pure function of
its key (the block's Verilog text itself, not the sources it came from), so a fresh clone of an unchanged
engine links the blocks an earlier clone built instead of Verilating them again (11 to 118 s each; 11
engine blocks in a ``make test``). ``SYNCFABRIC_BLOCK_CACHE`` names another directory, or ``build`` for
``<build root>/verilator/blocks`` (one cache per build directory, the behaviour before).

Blocks are locked like builds (shared while a top links one, exclusive while it is built or pruned; the locks
are ``flock``s, so clones running at once share them safely) and the least recently used beyond
``SYNCFABRIC_VERILATOR_BLOCKS_KEEP`` (default 24) are pruned.
"""

import functools
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["split_blocks", "block_config", "block_cache", "block_key", "build_block", "top_command", "write_hier_mk",
           "prune_blocks"]

_MODULE = re.compile(r"module\s+(\\\S+|[A-Za-z_][\w$]*)")


def split_blocks(text, blocks):
    """Cut the modules of each block in ``blocks`` out of the Verilog ``text``: returns ``(rest, {block:
    text})``. A module belongs to block ``B`` when it is named ``B`` or ``\\B.<anything>``; the attribute lines
    and comments just before a module go with it. Raises ``ValueError`` when a block's module is missing."""
    parts = {b: [] for b in blocks}
    rest, pending, current, found = [], [], None, set()
    for line in text.splitlines(keepends=True):
        if current is not None:
            current.append(line)
            if line.startswith("endmodule"):
                current = None
            continue
        m = _MODULE.match(line)
        if m is None:
            pending.append(line)
            continue
        name = m.group(1)
        owner = next((b for b in blocks if name == b or name.startswith(f"\\{b}.")), None)
        current = parts[owner] if owner is not None else rest
        found.add(name)
        current.extend(pending)
        current.append(line)
        pending = []
    rest.extend(pending)
    for b in blocks:
        if b not in found:
            raise ValueError(f"hierarchical block {b!r} is not a module of the design's Verilog")
    return "".join(rest), {b: "".join(p) for b, p in parts.items()}


def block_config(block, public):
    """The Verilator configuration file of ``block``: its ``hier_block`` line and the ``public`` rules
    ``(module, var)`` that name the block or its submodules (the top's own rules would only change the key)."""
    rules = [(m, v) for m, v in public if m == block or m.startswith(f"{block}.")]
    return ("`verilator_config\n" + "".join(f'public_flat_rw -module "{m}" -var "{v}"\n' for m, v in rules)
            + f'hier_block -module "{block}"\n')


def _common(build_args):
    """``build_args`` without the options ``--hierarchical`` passes on in its own form: itself and
    ``--threads N``; returns (args, threads)."""
    args, threads, it = [], 1, iter(build_args)
    for a in it:
        if a == "--threads":
            threads = int(next(it))
        elif a != "--hierarchical":
            args.append(a)
    return args, threads


def _block_args(block, source, vlt, obj, build_args):
    """Verilator's command for ``block`` as ``--hierarchical`` writes it (``V<block>__hierMkArgs.f``: the
    model's thread count goes to ``--hierarchical-child``)."""
    args, threads = _common(build_args)
    return [shutil.which("verilator"), "--cc", "-Mdir", str(obj), str(source), "--prefix", f"V{block}",
            "--mod-prefix", f"V{block}", "--top-module-encoded", block, "--lib-create", block,
            "--hierarchical-child", str(threads), "--hierarchical-block", f"{block},{block}", "--vpi",
            *args, "--no-public-flat-rw", str(vlt), "--timescale", "1ns/1ps"]


def block_cache():
    """The directory blocks are built in: ``$SYNCFABRIC_BLOCK_CACHE``; ``build`` for the build root's
    ``verilator/blocks``; by default ``$XDG_CACHE_HOME/syncfabric/verilator-blocks`` (``~/.cache`` when unset)."""
    from .harness import build_root

    where = os.environ.get("SYNCFABRIC_BLOCK_CACHE", "").strip()
    if where == "build":
        return build_root() / "verilator" / "blocks"
    if where:
        return Path(where).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "syncfabric" / "verilator-blocks"


@functools.cache
def _verilator_version(binary):
    """``verilator --version`` of ``binary`` (a block's library only links with the runtime it was built for)."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True)
    if out.returncode or not out.stdout.strip():
        raise RuntimeError(f"{binary} --version failed (exit {out.returncode}): {out.stderr.strip()}")
    return out.stdout.strip()


def block_key(block, text, vlt, build_args, flags, verilator=None):
    """The cache key of a block: its text and configuration, the make flags and the Verilator command with the
    tool's version in place of its path (``verilator``, default the one on ``PATH``; every clone has a
    Verilator of its own; the command's other paths are left out too)."""
    argv = _block_args(block, "SOURCE", "CONFIG", "OBJ", build_args)
    cmd = " ".join([_verilator_version(verilator or argv[0]), *argv[1:]])
    return hashlib.sha256("\0".join([text, vlt, flags, cmd]).encode()).hexdigest()[:16]


def build_block(root, block, text, public, build_args, flags, log_name="build.log"):
    """The built block ``block`` of Verilog ``text`` in the cache directory ``root``: returns ``(directory,
    lock)``, the lock held shared until the caller has linked the block's library
    (``directory/obj/lib<block>.a``) and the wrapper (``directory/obj/<block>.sv``). Builds it first unless a
    build of the same text, flags and Verilator version exists."""
    from .harness import _shared_once_built

    vlt = block_config(block, public)
    blk = Path(root) / f"{block}-{block_key(block, text, vlt, build_args, flags)}"
    return blk, _shared_once_built(blk, lambda: _build(blk, block, text, vlt, build_args, flags, log_name))


def _build(blk, block, text, vlt, build_args, flags, log_name):
    from .harness import _large_build_slot

    blk.mkdir(parents=True, exist_ok=True)
    source = blk / f"{block}.v"
    source.write_text(text)
    vlt_file = blk / "config.vlt"
    vlt_file.write_text(vlt)
    scratch = blk / "building"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    log_path = blk / log_name
    jobs = str(os.cpu_count() or 1)
    with open(log_path, "w") as log, _large_build_slot(len(text), log):
        proc = subprocess.run(_block_args(block, source, vlt_file, scratch, build_args), stdout=log,
                              stderr=subprocess.STDOUT, cwd=blk)
        if proc.returncode == 0:
            proc = subprocess.run(["make", "-C", str(scratch), "-f", f"V{block}.mk", f"VM_PREFIX=V{block}", "-j",
                                   jobs], stdout=log, stderr=subprocess.STDOUT, cwd=blk)
    if proc.returncode or not (scratch / f"lib{block}.a").exists():
        tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-25:])
        raise AssertionError(f"Verilator failed to build the block {block} (exit {proc.returncode}); "
                             f"{log_path} ends:\n{tail}")
    for f in [*scratch.glob("*.o"), *scratch.glob("*.gch")]:   # in the library / only for its compiles
        f.unlink()
    shutil.rmtree(blk / "obj", ignore_errors=True)
    os.replace(scratch, blk / "obj")
    (blk / "built").write_text(flags)


def top_command(blocks, toplevel, source, vlt, obj, exe, ldflags, build_args, cpp):
    """Verilator's command for the top ``toplevel`` of ``source`` (the design without its blocks) against the
    built ``blocks`` ({name: directory}), as ``--hierarchical`` writes it (``Vtop__hierMkArgs.f``)."""
    cmd = [shutil.which("verilator"), *[str(Path(d) / "obj" / f"{b}.sv") for b, d in blocks.items()],
           str(source), str(cpp), "--top-module", toplevel, "--prefix", "Vtop", "-Mdir", str(obj),
           "--mod-prefix", "Vtop"]
    for b in blocks:
        cmd += ["--hierarchical-block", f"{b},{b}"]
    args, threads = _common(build_args)
    return cmd + ["--threads", str(threads), "--cc", "--exe", "--vpi", "-o", str(exe), "-LDFLAGS", ldflags,
                  *args, "--no-public-flat-rw", str(vlt), "--timescale", "1ns/1ps"]


def write_hier_mk(obj, blocks):
    """The ``Vtop_hier.mk`` that the top's makefile includes: the blocks' libraries, already built, reached
    through a link ``obj/V<block>`` to each block's directory (Verilator's makefile merges the libraries into
    the top's archive by a path relative to ``obj``)."""
    libs = ""
    for b, d in blocks.items():
        link = Path(obj) / f"V{b}"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path(d) / "obj", target_is_directory=True)
        libs += f"  V{b}/lib{b}.a \\\n"
    (Path(obj) / "Vtop_hier.mk").write_text(
        "# Hierarchical blocks built once (syncfabric.host.transports.verilator_blocks)\n"
        "ifndef VM_HIER_VERILATION_INCLUDED\nVM_HIER_VERILATION_INCLUDED = 1\n"
        f"VM_HIER_LIBS := \\\n{libs}\nendif\n")


def prune_blocks(root):
    """Remove the least recently used blocks in the cache directory ``root`` beyond
    ``SYNCFABRIC_VERILATOR_BLOCKS_KEEP`` (default 24), but none that a process builds or links (holds its lock)."""
    from .harness import _prune_verilator_builds

    if Path(root).is_dir():
        _prune_verilator_builds(Path(root), "SYNCFABRIC_VERILATOR_BLOCKS_KEEP")
