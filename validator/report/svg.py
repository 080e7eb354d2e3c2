"""Small inline-SVG charts for the self-contained HTML report (no plotting dependency)."""

from __future__ import annotations

import html
import math

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd")
W, H, PAD_L, PAD_B, PAD_T, PAD_R = 640, 270, 56, 36, 40, 16


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * e:
            return m * e
    return 10 * e


def _frame(
    title: str, x_label: str, y_label: str, x_max: float, y_max: float, body: str, legend: list, kind: str
) -> str:
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    ticks = []
    for i in range(5):
        y = PAD_T + ph - ph * i / 4
        ticks.append(
            f'<line x1="{PAD_L}" y1="{y:.1f}" x2="{W - PAD_R}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">'
            f"{y_max * i / 4:g}</text>"
        )
        x = PAD_L + pw * i / 4
        ticks.append(
            f'<text x="{x:.1f}" y="{H - PAD_B + 16}" text-anchor="middle" font-size="11">{x_max * i / 4:.3g}</text>'
        )
    leg, x, row = [], PAD_L + 10, 0
    for n, c in legend:  # entries as wide as their text (about 6 px a character), wrapping to a new row
        w = 24 + 6 * len(n)
        if x + w > W - PAD_R and x > PAD_L + 10:
            x, row = PAD_L + 10, row + 1
        leg.append(
            f'<rect x="{x}" y="{6 + 14 * row}" width="10" height="10" fill="{c}"/>'
            f'<text x="{x + 14}" y="{15 + 14 * row}" font-size="11">{html.escape(n)}</text>'
        )
        x += w
    legend_svg = "".join(leg)
    return (
        f'<svg class="chart" data-kind="{kind}" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" role="img" aria-label="{html.escape(title)}">'
        f"<title>{html.escape(title)}</title>{''.join(ticks)}"
        f'<line x1="{PAD_L}" y1="{PAD_T + ph}" x2="{W - PAD_R}" y2="{PAD_T + ph}" stroke="#333"/>'
        f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{PAD_T + ph}" stroke="#333"/>{body}{legend_svg}'
        f'<text x="{PAD_L + pw / 2}" y="{H - 4}" text-anchor="middle" font-size="12">{html.escape(x_label)}</text>'
        f'<text x="14" y="{PAD_T + ph / 2}" text-anchor="middle" font-size="12" '
        f'transform="rotate(-90 14 {PAD_T + ph / 2})">{html.escape(y_label)}</text></svg>'
    )


def lines(
    title: str,
    series: list[tuple[str, list[tuple[float, float]]]],
    x_label: str,
    y_label: str,
    y_max: float | None = None,
    hline: tuple[str, float] | None = None,
    step: bool = False,
    markers: tuple[str, ...] = (),
) -> str:
    """Line series; those named in `markers` are drawn as large dots only (exact readings)."""
    pts = [p for _, s in series for p in s]
    x_max = _nice_max(max((x for x, _ in pts), default=1.0))
    y_top = _nice_max(max([y for _, y in pts] + [y_max or 0, hline[1] if hline else 0] or [1.0]))
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def xy(x, y):
        return PAD_L + pw * x / x_max, PAD_T + ph - ph * y / y_top

    body: list[str] = []
    legend = []
    for i, (name, s) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        legend.append((name, c))
        if not s:
            continue
        if name in markers:  # the first marker series as rings, the next as dots inside them: both show
            ring = markers.index(name) == 0
            style = f'r="6" fill="none" stroke="{c}" stroke-width="2.5"' if ring else f'r="2.8" fill="{c}"'
            body.extend(
                f'<circle class="marker" data-name="{html.escape(name)}" cx="{xy(x, y)[0]:.1f}" '
                f'cy="{xy(x, y)[1]:.1f}" {style}/>'
                for x, y in s
            )
            continue
        path: list[str] = []
        prev = None
        for x, y in s:
            px, py = xy(x, y)
            if step and prev is not None:
                path.append(f"L{px:.1f},{prev:.1f}")
            path.append(f"{'M' if not path else 'L'}{px:.1f},{py:.1f}")
            prev = py
        # the first of several series (the prediction) as a wide translucent band, the others thin on
        # top of it: where they agree both stay visible
        dash = (
            ' stroke-width="8" stroke-opacity="0.3" stroke-linejoin="round"'
            if i == 0 and len(series) > 1
            else ' stroke-width="1.8"'
        )
        body.append(
            f'<path class="series" data-name="{html.escape(name)}" d="{" ".join(path)}" fill="none" '
            f'stroke="{c}"{dash}/>'
        )
        if len(s) < 80 and not (i == 0 and len(series) > 1):
            body.extend(f'<circle cx="{xy(x, y)[0]:.1f}" cy="{xy(x, y)[1]:.1f}" r="2.2" fill="{c}"/>' for x, y in s)
    if hline:
        _, y = xy(0, hline[1])
        body.append(
            f'<line x1="{PAD_L}" y1="{y:.1f}" x2="{W - PAD_R}" y2="{y:.1f}" stroke="#888" '
            f'stroke-dasharray="4 3"/><text x="{W - PAD_R - 4}" y="{y - 4:.1f}" text-anchor="end" '
            f'font-size="11" fill="#555">{html.escape(hline[0])}</text>'
        )
    return _frame(title, x_label, y_label, x_max, y_top, "".join(body), legend, "lines")


def cdf(title: str, series: list[tuple[str, list[float]]], x_label: str) -> str:
    pts = []
    for name, vals in series:
        v = sorted(vals)
        n = len(v)
        step = max(n // 400, 1)  # at most ~400 points a series
        pts.append((name, [(x, (i + 1) / n) for i, x in enumerate(v) if i % step == 0 or i == n - 1]))
    return lines(title, pts, x_label, "fraction of values <=", y_max=1.0).replace(
        'data-kind="lines"', 'data-kind="cdf"'
    )


def stacked_bar(title: str, parts: list[tuple[str, float]], total: float | None, unit: str = "GiB") -> str:
    pw = W - PAD_L - PAD_R
    top = max(sum(v for _, v in parts), total or 0, 1e-9)
    x: float = PAD_L
    body: list[str] = []
    for i, (name, v) in enumerate(parts):
        w = pw * v / top
        c = COLORS[i % len(COLORS)]
        body.append(
            f'<rect class="bar" data-name="{html.escape(name)}" x="{x:.1f}" y="50" width="{max(w, 0):.1f}" '
            f'height="40" fill="{c}"/><rect x="{PAD_L + 160 * i}" y="104" width="10" height="10" '
            f'fill="{c}"/><text x="{PAD_L + 14 + 160 * i}" y="113" font-size="11">'
            f"{html.escape(name)} {v:.4g} {unit}</text>"
        )
        x += w
    if total:
        tx = PAD_L + pw * total / top
        body.append(
            f'<line x1="{tx:.1f}" y1="40" x2="{tx:.1f}" y2="100" stroke="#000" stroke-width="2"/>'
            f'<text x="{tx:.1f}" y="34" text-anchor="middle" font-size="11">budget {total:.3g} {unit}</text>'
        )
    return (
        f'<svg class="chart" data-kind="bar" xmlns="http://www.w3.org/2000/svg" width="{W}" height="130" '
        f'viewBox="0 0 {W} 130" role="img" aria-label="{html.escape(title)}"><title>{html.escape(title)}</title>'
        f"{''.join(body)}</svg>"
    )


def prompt_bars(title: str, bars: list[dict], block_size: int) -> str:
    """The template audit's picture: one row per prompt, its blocks as sent (hit, in blue, then its
    own) and, below, as they would be with the shared part first (possible hit, in green)."""
    if not bars:
        return ""
    top = max(b["prompt_tokens"] for b in bars) or 1
    pw, row = W - PAD_L - PAD_R, 14
    h = 44 + row * len(bars)
    body: list[str] = []
    for i, b in enumerate(bars):
        y = 36 + row * i
        scale = pw / top
        hit = b["observed"] if b["observed"] is not None else (b["predicted"] or 0)
        own = b["prompt_tokens"] - hit
        body.append(
            f'<rect class="hit" data-id="{html.escape(b["id"])}" x="{PAD_L}" y="{y}" width="{hit * scale:.1f}" '
            f'height="6" fill="{COLORS[0]}"/><rect x="{PAD_L + hit * scale:.1f}" y="{y}" width="{own * scale:.1f}" '
            f'height="6" fill="#ccc"/><rect class="possible" x="{PAD_L}" y="{y + 7}" '
            f'width="{(b["possible"] or 0) * scale:.1f}" height="3" fill="{COLORS[2]}"/>'
            f'<text x="{PAD_L - 4}" y="{y + 8}" text-anchor="end" font-size="9">{html.escape(b["id"])}</text>'
        )
    legend = (
        f'<rect x="{PAD_L}" y="8" width="10" height="10" fill="{COLORS[0]}"/><text x="{PAD_L + 14}" y="17" '
        f'font-size="11">prefix hit (as served)</text><rect x="{PAD_L + 150}" y="8" width="10" height="10" '
        f'fill="#ccc"/><text x="{PAD_L + 164}" y="17" font-size="11">own blocks</text><rect x="{PAD_L + 250}" '
        f'y="8" width="10" height="10" fill="{COLORS[2]}"/><text x="{PAD_L + 264}" y="17" font-size="11">'
        f"hit with the shared part first (blocks of {block_size})</text>"
    )
    return (
        f'<svg class="chart" data-kind="prompts" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" '
        f'viewBox="0 0 {W} {h}" role="img" aria-label="{html.escape(title)}"><title>{html.escape(title)}</title>'
        f"{legend}{''.join(body)}</svg>"
    )
