"""Minimal SVG charts (line charts and stacked bars), so the reproductions plot without matplotlib."""

from html import escape

__all__ = ["line_chart", "bar_chart"]

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
W, H, L, R, T, B = 640, 400, 70, 170, 40, 50


def _nice(v):
    return f"{v:.3g}"


def _frame(title, xlabel, ylabel, xmin, xmax, ymin, ymax, xticks=None):
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           f'font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="13">{escape(title)}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">{escape(xlabel)}</text>',
           f'<text x="15" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 15 '
           f'{(T + H - B) / 2})">{escape(ylabel)}</text>']
    for k in range(6):
        y = ymin + (ymax - ymin) * k / 5
        py = H - B - (H - B - T) * k / 5
        out.append(f'<text x="{L - 5}" y="{py + 4}" text-anchor="end">{_nice(y)}</text>')
        out.append(f'<line x1="{L}" y1="{py}" x2="{W - R}" y2="{py}" stroke="#ddd"/>')
    if xticks is None:
        xticks = [(xmin + (xmax - xmin) * k / 5, _nice(xmin + (xmax - xmin) * k / 5)) for k in range(6)]
    for x, label in xticks:
        px = L + (W - L - R) * (x - xmin) / ((xmax - xmin) or 1)
        out.append(f'<text x="{px}" y="{H - B + 15}" text-anchor="middle">{escape(str(label))}</text>')
    return out


def line_chart(path, title, xlabel, ylabel, series, step=False):
    """Write an SVG line chart: ``series`` is ``{label: [(x, y), ...]}``; ``step`` draws steps (timelines)."""
    pts = [p for s in series.values() for p in s]
    xmin, xmax = min(p[0] for p in pts), max(p[0] for p in pts)
    ymin, ymax = min(0.0, min(p[1] for p in pts)), max(p[1] for p in pts) or 1.0
    out = _frame(title, xlabel, ylabel, xmin, xmax, ymin, ymax)

    def px(x):
        return L + (W - L - R) * (x - xmin) / ((xmax - xmin) or 1)

    def py(y):
        return H - B - (H - B - T) * (y - ymin) / ((ymax - ymin) or 1)

    for i, (label, s) in enumerate(series.items()):
        c = _COLORS[i % len(_COLORS)]
        coords = []
        for j, (x, y) in enumerate(s):
            if step and j:
                coords.append(f"{px(x):.1f},{py(s[j - 1][1]):.1f}")
            coords.append(f"{px(x):.1f},{py(y):.1f}")
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{" ".join(coords)}"/>')
        out.append(f'<text x="{W - R + 8}" y="{T + 15 * i + 10}" fill="{c}">{escape(label)}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def bar_chart(path, title, ylabel, groups, stacks):
    """Write a stacked bar chart: ``groups`` is ``[(group label, [(bar label, [v per stack]), ...]), ...]``,
    ``stacks`` the stack names (legend)."""
    bars = [(g, b, v) for g, bs in groups for b, v in bs]
    ymax = max(sum(v) for _, _, v in bars) or 1.0
    n = len(bars) + len(groups)
    out = _frame(title, "", ylabel, 0, 1, 0, ymax, xticks=[])
    bw = (W - L - R) / n
    k = 0
    for g, bs in groups:
        gx = L + bw * (k + 0.5)
        for b, vals in bs:
            x = L + bw * (k + 0.5)
            y0 = 0.0
            for i, v in enumerate(vals):
                h = (H - B - T) * v / ymax
                y = H - B - (H - B - T) * (y0 + v) / ymax
                out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bw * 0.9:.1f}" height="{h:.1f}" '
                           f'fill="{_COLORS[i % len(_COLORS)]}"/>')
                y0 += v
            out.append(f'<text x="{x + bw * 0.45:.1f}" y="{H - B + 12}" font-size="7" text-anchor="end" '
                       f'transform="rotate(-45 {x + bw * 0.45:.1f} {H - B + 12})">{escape(b)}</text>')
            k += 1
        out.append(f'<text x="{gx:.1f}" y="{T - 5}" font-size="9">{escape(g)}</text>')
        k += 1
    for i, s in enumerate(stacks):
        out.append(f'<text x="{W - R + 8}" y="{T + 15 * i + 10}" fill="{_COLORS[i % len(_COLORS)]}">'
                   f'{escape(s)}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
