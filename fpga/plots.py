"""The report's pictures, written as SVG directly (no plotting library needed).

:func:`area_breakdown_svg`: one horizontal bar per component, cells and SRAM macros stacked, at 45 nm.
:func:`sweep_svg`: area against chunk SRAM size, FSM count and ALU lanes, one panel each.
"""

from pathlib import Path
from xml.sax.saxutils import escape

__all__ = ["area_breakdown_svg", "sweep_svg"]

_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1")


def _svg(width, height, body):
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">\n'
            f'<rect width="{width}" height="{height}" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")


def area_breakdown_svg(rep, path):
    """Bars of cell and macro area per component of report ``rep``; returns the file name."""
    rows = [(c, r["asic_area_um2"], r["macro_area_um2"]) for c, r in rep["components"].items()]
    top = max([a + m for _, a, m in rows] + [1.0])
    left, bar_w, h = 90, 480, 26
    body = [f'<text x="10" y="20" font-size="14">Area at 45 nm ({escape(rep["config"])} engine), um^2</text>']
    y = 40
    for c, cells, mac in rows:
        wc, wm = bar_w * cells / top, bar_w * mac / top
        body.append(f'<text x="10" y="{y + 17}">{escape(c)}</text>')
        body.append(f'<rect x="{left}" y="{y}" width="{wc:.1f}" height="{h - 6}" fill="{_COLORS[0]}"/>')
        body.append(f'<rect x="{left + wc:.1f}" y="{y}" width="{wm:.1f}" height="{h - 6}" fill="{_COLORS[1]}"/>')
        body.append(f'<text x="{left + wc + wm + 6:.1f}" y="{y + 15}">{cells + mac:,.0f}</text>')
        y += h
    body.append(f'<rect x="{left}" y="{y + 8}" width="12" height="12" fill="{_COLORS[0]}"/>'
                f'<text x="{left + 16}" y="{y + 18}">standard cells</text>')
    body.append(f'<rect x="{left + 130}" y="{y + 8}" width="12" height="12" fill="{_COLORS[1]}"/>'
                f'<text x="{left + 146}" y="{y + 18}">SRAM macros (model)</text>')
    Path(path).write_text(_svg(left + bar_w + 120, y + 34, body))
    return str(path)


def _panel(x0, y0, w, h, title, xlabel, points):
    """A line plot of ``points`` ([(x, y)]) in the box at (x0, y0)."""
    body = [f'<text x="{x0}" y="{y0 - 8}">{escape(title)}</text>',
            f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>',
            f'<text x="{x0 + w / 2:.0f}" y="{y0 + h + 30}" text-anchor="middle">{escape(xlabel)}</text>']
    if not points:
        return body
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    xmin, xmax = min(xs), max(xs)
    ymax = max(ys + [1.0])

    def px(x):
        return x0 + 10 + (w - 20) * ((x - xmin) / (xmax - xmin) if xmax > xmin else 0.5)

    def py(v):
        return y0 + h - 10 - (h - 20) * v / ymax

    pts = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in points)
    body.append(f'<polyline points="{pts}" fill="none" stroke="{_COLORS[0]}" stroke-width="2"/>')
    for x, v in points:
        body.append(f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="3" fill="{_COLORS[0]}"/>')
        body.append(f'<text x="{px(x):.1f}" y="{y0 + h + 14}" text-anchor="middle">{x:g}</text>')
        body.append(f'<text x="{px(x) + 4:.1f}" y="{py(v) - 6:.1f}" font-size="10">{v:,.0f}</text>')
    return body


def sweep_svg(sweep, path):
    """Three panels: chunk SRAM area against its buffers, control unit + link ports against FSMs, ALU area
    against lanes (um^2 at 45 nm); returns the file name."""
    w, h, gap = 260, 200, 40
    body = ['<text x="10" y="20" font-size="14">Area growth at 45 nm (um^2)</text>']
    panels = (("chunk SRAM", "chunk buffers", [(p["value"], p["area_um2"]) for p in sweep["sram"]]),
              ("control unit + link ports", "FSMs", [(p["value"], p["area_um2"]) for p in sweep["fsms"]]),
              ("one ALU", "32-bit lanes", [(p["value"], p["area_um2"]) for p in sweep["lanes"]]))
    for i, (title, xl, pts) in enumerate(panels):
        body += _panel(20 + i * (w + gap), 50, w, h, title, xl, pts)
    Path(path).write_text(_svg(3 * (w + gap) + 20, h + 100, body))
    return str(path)
