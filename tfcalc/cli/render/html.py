"""A Doc as HTML for a notebook (Jupyter shows a report's ``_repr_html_``): the same titles, tables and
notes as the Markdown writer, every column, cells formatted as the table formats them; all text escaped."""

from __future__ import annotations

from html import escape

from tfcalc.cli.render.backends import cell_text
from tfcalc.cli.render.doc import Doc, Note, Rule


def write_html(doc: Doc, exact: bool = False) -> str:
    out = ['<div class="tfcalc">']
    for block in doc.blocks:
        if isinstance(block, Rule):
            out.append("<hr>")
        elif isinstance(block, Note):
            out.append(f"<p>{escape(block.text)}</p>")
        else:
            t = block.without_empty_columns()
            out.append(f"<p><b>{escape(t.title)}</b></p><table><thead><tr>")
            out += [f'<th style="text-align:{c.justify}">{escape(c.header)}</th>' for c in t.columns]
            out.append("</tr></thead><tbody>")
            for row in t.rows:
                cells = [f'<td style="text-align:{c.justify}">{escape(cell_text(cell, c.unit, exact))}</td>'
                         for cell, c in zip(row.cells, t.columns, strict=True)]
                out.append(("<tr style=\"font-weight:bold\">" if row.style == "bold" else "<tr>") + "".join(cells)
                           + "</tr>")
            out.append("</tbody></table>")
            if t.caption:
                out.append(f"<p><small>{escape(t.caption)}</small></p>")
    out.append("</div>")
    return "\n".join(out)
