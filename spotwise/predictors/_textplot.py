"""A learning curve drawn with characters, for the terminal (no plotting library)."""

from __future__ import annotations

from collections.abc import Sequence


def curve_plot(
    observed: tuple[Sequence[float], Sequence[float]],
    fitted: tuple[Sequence[float], Sequence[float]],
    hidden: tuple[Sequence[float], Sequence[float]] | None = None,
    band: tuple[float, float] | None = None,
    width: int = 64,
    height: int = 16,
) -> list[str]:
    """Text rows: ``●`` observed, ``·`` fit / forecast, ``○`` held-out truth, ``┆`` final band."""
    xs = [*observed[0], *fitted[0], *(hidden[0] if hidden else [])]
    ys = [*observed[1], *fitted[1], *(hidden[1] if hidden else []), *(band or ())]
    ys = [y for y in ys if y == y and abs(y) != float("inf")]
    if not xs or not ys:
        return ["(nothing to draw)"]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 0.5, y1 + 0.5
    if x1 - x0 < 1e-12:
        x1 = x0 + 1.0
    grid = [[" "] * width for _ in range(height)]

    def put(x: float, y: float, ch: str, over: bool = True) -> None:
        if y != y:
            return
        c = min(width - 1, max(0, round((x - x0) / (x1 - x0) * (width - 1))))
        r = min(height - 1, max(0, round((y1 - y) / (y1 - y0) * (height - 1))))
        if over or grid[r][c] == " ":
            grid[r][c] = ch

    for x, y in zip(*fitted, strict=False):
        put(x, y, "·", over=False)
    if band is not None:
        xb = fitted[0][-1] if len(fitted[0]) else x1
        steps = max(2, round((band[1] - band[0]) / (y1 - y0) * (height - 1)) + 1)
        for i in range(steps):
            put(xb, band[0] + (band[1] - band[0]) * i / (steps - 1), "┆")
    if hidden:
        for x, y in zip(*hidden, strict=False):
            put(x, y, "○")
    for x, y in zip(*observed, strict=False):
        put(x, y, "●")
    lab = [f"{y1:.4g}", f"{(y0 + y1) / 2:.4g}", f"{y0:.4g}"]
    pad = max(len(s) for s in lab)
    out = []
    for r, row in enumerate(grid):
        label = (
            lab[0] if r == 0 else lab[1] if r == height // 2 else lab[2] if r == height - 1 else ""
        )
        out.append(f"{label:>{pad}} │{''.join(row)}")
    out.append(" " * pad + " └" + "─" * width)
    left, right = f"{x0:g}", f"{x1:g}"
    out.append(" " * (pad + 2) + left + " " * max(1, width - len(left) - len(right)) + right)
    return out
