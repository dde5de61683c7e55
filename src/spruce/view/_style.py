"""What every page shares: escaping, dtype colours, the stylesheet (light and dark), bars."""

from __future__ import annotations

import html as _html

# One colour per dtype family, readable on both themes.
_DTYPE_COLOURS = (
    ("bfloat16", "#a855f7"),
    ("float8", "#d946ef"),
    ("float16", "#8b5cf6"),
    ("float32", "#3b82f6"),
    ("float64", "#1d4ed8"),
    ("complex", "#ec4899"),
    ("uint", "#f59e0b"),
    ("int", "#10b981"),
    ("bool", "#78716c"),
)
_OTHER = "#64748b"

# Distinct colours for treemap groups (module types or names).
PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#8cd17d", "#f1ce63",
)


def esc(text: object) -> str:
    """``text`` escaped for HTML text and attribute values."""
    return _html.escape(str(text), quote=True)


def dtype_colour(dtype: str) -> str:
    """The colour of a dtype family (``float32`` blue, ``int*`` green, ...)."""
    for prefix, colour in _DTYPE_COLOURS:
        if dtype.startswith(prefix):
            return colour
    return _OTHER


def bar(share: float, cls: str = "bar") -> str:
    """A horizontal bar filled to ``share`` (0..1) of its width."""
    pct = max(0.0, min(1.0, share)) * 100
    return f'<span class="{cls}"><i style="width:{pct:.1f}%"></i></span>'


CSS = """
:root{--bg:#fff;--fg:#1f2937;--dim:#6b7280;--line:#e5e7eb;--row:#f9fafb;--bar:#3b82f6;
--barbg:#e5e7eb;--bad:#dc2626;--add:#16a34a;--del:#dc2626;--chg:#d97706;--shp:#7c3aed;--tie:#0891b2}
@media (prefers-color-scheme:dark){:root{--bg:#0f172a;--fg:#e2e8f0;--dim:#94a3b8;--line:#1e293b;
--row:#111c33;--bar:#60a5fa;--barbg:#1e293b;--bad:#f87171;--add:#4ade80;--del:#f87171;
--chg:#fbbf24;--shp:#a78bfa;--tie:#22d3ee}}
*{box-sizing:border-box}
body{margin:0;padding:16px 20px;background:var(--bg);color:var(--fg);
font:13px/1.45 ui-sans-serif,system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
h1{font-size:18px;margin:0 0 4px}
.sub{color:var(--dim);margin:0 0 12px}
.legend span{margin-right:12px;white-space:nowrap}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.mono,.r .k,.r .s,.r .n,.r .p,.r .b,.r .st{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.r{display:grid;grid-template-columns:minmax(14em,1.6fr) 10.5em 9em 7.5em 11.5em minmax(17em,2fr) 76px;
gap:0 10px;align-items:center;padding:2px 4px;border-bottom:1px solid var(--line);min-height:22px}
.hd{font-weight:600;color:var(--dim);border-bottom:2px solid var(--line)}
details>summary{list-style:none;cursor:pointer}
details>summary::-webkit-details-marker{display:none}
details>summary:not(.r)::before{content:"\\25B8  ";color:var(--dim)}
details[open]>summary:not(.r)::before{content:"\\25BE  "}
summary.r:hover,.r:hover{background:var(--row)}
.k{overflow:hidden;text-overflow:ellipsis;white-space:nowrap;padding-left:calc(var(--d,0)*14px)}
summary .k::before{content:"\\25B8";display:inline-block;width:12px;color:var(--dim)}
details[open]>summary .k::before{content:"\\25BE"}
.r>.k.leafk{padding-left:calc(var(--d,0)*14px + 12px)}
.t{color:var(--dim);overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.s,.n{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.p,.b{text-align:right;white-space:nowrap}
.b{display:flex;gap:6px;align-items:center;justify-content:flex-end}
.bar{display:inline-block;width:56px;height:8px;background:var(--barbg);border-radius:2px;overflow:hidden;flex:none}
.bar i{display:block;height:100%;background:var(--bar)}
.dt{display:inline-block;padding:0 6px;border-radius:3px;color:#fff;font-size:11px;font-family:ui-monospace,monospace}
.st{color:var(--dim);white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.bad{color:var(--bad);font-weight:700}
.tie{color:var(--tie);font-weight:600}
.note{color:var(--dim);font-style:italic}
svg.h{display:block}
svg.h path{fill:var(--bar)}
.grid rect{stroke:var(--bg);stroke-width:1}
.grid text{font:9px ui-monospace,monospace;fill:#fff}
.add{color:var(--add)}.del{color:var(--del)}.chg{color:var(--chg)}.shp{color:var(--shp)}
.tag{display:inline-block;padding:0 6px;border-radius:3px;color:#fff;font-size:11px;font-weight:600}
.tag.add{background:var(--add)}.tag.del{background:var(--del)}.tag.chg{background:var(--chg)}
.tag.shp{background:var(--shp)}.tag.same{background:var(--dim)}
table.dl{border-collapse:collapse;width:100%;margin:6px 0 18px}
table.dl td,table.dl th{padding:3px 8px;border-bottom:1px solid var(--line);text-align:left;white-space:nowrap}
table.dl td.num,table.dl th.num{text-align:right;font-family:ui-monospace,monospace}
table.dl td.mono{font-family:ui-monospace,monospace}
h2{font-size:15px;margin:18px 0 4px}
.mem{display:grid;grid-template-columns:7em 1fr 8em;gap:4px 10px;align-items:center;max-width:720px}
.mem .bar{width:100%;height:12px}
"""


def page(title: str, body: str) -> str:
    """A complete self-contained HTML page (no script, no external resource)."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        "<meta name=\"color-scheme\" content=\"light dark\">"
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )
