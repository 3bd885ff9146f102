"""The same SVG in fewer bytes, for notebooks: Qt's SVG writer restates every style on every element.

``QSvgGenerator`` writes each painter state as a ``<g>`` with every paint property again, and each text
with its full font (``font-family="Inter,Segoe UI,Helvetica Neue,..." font-size="11" font-weight="400"``):
three quarters of a drawing's bytes. ``compact_svg`` rewrites it without changing what any element draws
(Qt's renderer draws both alike: tests/test_notebook.py):

- each element's style values become classes in one ``<style>`` block, one class per family of values
  (font, line ends, fill, stroke: few distinct values each); a class rule sets exactly those properties on
  exactly that element, as the attributes did;
- an inherited property stating the value the element inherits anyway (its nearest group's, or SVG's
  initial value where no group sets it) is dropped; a label's group loses the paint its texts all state
  themselves (Qt opens one group per label), and a group left with no attributes gives its children to
  its parent;
- ``matrix(1,0,0,1,dx,dy)`` groups have the offset moved into their children's coordinates; Qt's
  rounded-rectangle paths become ``<rect rx ry>``; a gradient written again with the same stops is
  shared; coordinates are written to 0.01 of a pixel (Qt writes 4 to 6 digits), far below what a screen
  or printer shows; identity transforms and ``vector-effect="none"`` are dropped; ``xml:space`` is
  dropped from texts holding no whitespace it would keep; groups closed and reopened alike are one.
- ``fonts`` (see ``compact_svg``) names the family the boxes were measured in.

The notebook stores this once per output (``gradviz/notebook.py``); ``gradviz export x.svg`` keeps
Qt's plain attributes.
"""
from __future__ import annotations

import re

__all__ = ["compact_svg"]

STYLED = ("font-family", "font-size", "font-weight", "font-style", "stroke-linecap", "stroke-linejoin",
          "fill-opacity", "stroke-opacity", "fill-rule", "fill", "stroke-width", "stroke-dasharray",
          "stroke-dashoffset", "stroke")
_ATTR = re.compile(r'\s(' + "|".join(STYLED) + r')="((?!url\()[^"<>]*)"')   # a paint server stays an attribute
_TAG = re.compile(r"<(?!/|\?|!)([A-Za-z]+)((?:\s+[A-Za-z_:][-\w:.]*=\"[^\"]*\")*)\s*(/?)>", re.S)
_IDENTITY = re.compile(r'\s(?:transform="matrix\(1,0,0,1,0,0\)"|vector-effect="none")')
_PLAIN_TEXT = re.compile(r'(<text\b[^>]*?)\sxml:space="preserve"([^>]*>)([^<]*)(</text>)')
_NUMBER_ATTR = re.compile(r'\s(d|points|x|y|x1|y1|x2|y2|width|height|cx|cy|r|rx|ry)="([^"]*)"')
_DECIMALS = re.compile(r"(-?\d+)\.(\d{3,})")
_BETWEEN = re.compile(r'\s+(?=[A-Za-z_:][-\w:.]*=")')
_EMPTY_GROUP = re.compile(r"<g(?:\s+[A-Za-z_:][-\w:.]*=\"[^\"]*\")*\s*>\s*</g>", re.S)


def compact_svg(svg: str, fonts: tuple[str, ...] | None = None) -> str:
    """``svg`` (Qt's writer) with repeated style attributes as CSS classes; unchanged if it has classes or styles.

    ``fonts``: the families the texts were measured in, first the one the layout used (``metrics.
    measured_families``). Qt's writer states gradviz's whole wish list as the family, and Qt's SVG renderer
    takes a list as one unknown name and draws its default font (DejaVu Sans here, 14 % wider than the
    Liberation Sans the boxes were sized with: a fold's long line ran past its box). So the class rule
    names the measured family alone, which every reader applies, and a rule inside ``@media all``, which
    browsers apply and Qt's CSS subset (no at-rules) skips, gives browsers the list led by that family and
    its metric twins."""
    if " class=" in svg or "<style" in svg or "<svg" not in svg:
        return svg
    classes: dict[tuple, str] = {}

    def tag(match: re.Match) -> str:
        name, attrs, close = match.group(1), match.group(2), match.group(3)
        attrs = _IDENTITY.sub("", attrs)
        found = _ATTR.findall(attrs)
        if found and name != "svg":
            # each family of the element's style values (font, line ends, paint) is one class
            names = " ".join(classes.setdefault(pairs, _name(len(classes))) for pairs in _families(found))
            attrs = _ATTR.sub("", attrs) + f' class="{names}"'
        attrs = _NUMBER_ATTR.sub(_round_numbers, attrs)
        attrs = _BETWEEN.sub(" ", attrs).strip()       # whitespace between attributes, never inside a value
        return f"<{name}{' ' + attrs if attrs else ''}{close}>"

    flat = _TAG.sub(lambda m: f"<{m.group(1)} {' '.join(m.group(2).split())}{m.group(3)}>".replace(" >", ">")
                    .replace(" /", "/"), _PLAIN_TEXT.sub(_plain_text, svg))   # one tag, one line
    flat = _drop_defaults(_shared_gradients(_fold_translations(_rounded_rects(_translations(_text_groups(
        _drop_group_fonts(flat)))))))
    body = _TAG.sub(tag, flat)
    previous = None
    while previous != body:
        previous, body = body, _EMPTY_GROUP.sub("", body)
    body = _merge_groups(_unwrap_bare_groups(re.sub(r"\n\s*\n+", "\n", body)))
    if not classes:
        return body
    if fonts:
        classes = {tuple(("font-family", fonts[0]) if k == "font-family" else (k, v) for k, v in pairs): cls
                   for pairs, cls in classes.items()}
    rules = "".join(f".{cls}{{{';'.join(_rule(*pair) for pair in pairs)}}}" for pairs, cls in classes.items())
    with_font = [cls for pairs, cls in classes.items() if any(k == "font-family" for k, _ in pairs)]
    if fonts and with_font:
        rules += f"@media all{{{','.join('.' + c for c in with_font)}{{font-family:{','.join(fonts)}}}}}"
    end = body.index(">", body.index("<svg")) + 1
    return f"{body[:end]}\n<style>{rules}</style>{body[end:]}"


_FAMILIES = (("font-family", "font-size", "font-weight", "font-style"), ("stroke-linecap", "stroke-linejoin"),
             ("fill", "fill-opacity", "fill-rule"))


def _families(found: list[tuple[str, str]]) -> list[tuple[tuple[str, str], ...]]:
    """An element's style pairs split into fonts, line ends, fill and the rest (stroke): few distinct values each."""
    groups = [tuple(p for p in found if p[0] in family) for family in _FAMILIES]
    groups.append(tuple(p for p in found if not any(p[0] in family for family in _FAMILIES)))
    return [g for g in groups if g]


def _rule(name: str, value: str) -> str:
    # a font size attribute is in user units; CSS needs the unit (px is the user unit)
    if name == "font-size" and re.fullmatch(r"[\d.]+", value):
        value += "px"
    return f"{name}:{value}"


def _plain_text(match: re.Match) -> str:
    text = match.group(3)
    if text != text.strip() or "  " in text or "\n" in text or "\t" in text:
        return match.group(0)           # whitespace xml:space keeps: leave it
    return match.group(1) + match.group(2) + text + match.group(4)


def _merge_groups(body: str) -> str:
    """``</g>`` followed by the very ``<g ...>`` that was just closed: one group (Qt reopens one per item)."""
    out: list[str] = []
    stack: list[str] = []               # the open groups' tags
    last_closed: str | None = None      # the tag of the group the previous line closed
    for line in body.split("\n"):
        tag = line.strip()
        if tag.startswith("<g") and tag.endswith(">") and not tag.endswith("/>"):
            stack.append(tag)
            if last_closed == tag and out and out[-1].strip() == "</g>":
                out.pop()
                last_closed = None
                continue
        elif tag == "</g>":
            last_closed = stack.pop() if stack else None
            out.append(line)
            continue
        if tag:
            last_closed = None
        out.append(line)
    return "\n".join(out)


def _name(k: int) -> str:
    """Short class names: a .. z, then a0, b0 ..."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return letters[k % 26] + (str(k // 26 - 1) if k >= 26 else "")


def _round_numbers(match: re.Match) -> str:
    def short(m: re.Match) -> str:
        value = f"{float(m.group(0)):.2f}".rstrip("0").rstrip(".")
        return "0" if value in ("-0", "") else value
    return f' {match.group(1)}="{_DECIMALS.sub(short, match.group(2))}"'


_FONT = ("font-family", "font-size", "font-weight", "font-style")
_FONT_ATTR = re.compile(r'\s(?:' + "|".join(_FONT) + r')="[^"]*"')


def _drop_group_fonts(svg: str) -> str:
    """Font attributes of ``<g>`` tags whose every ``<text>`` descendant carries all four itself."""
    lines = svg.split("\n")
    stack: list[int] = []                 # line numbers of the open groups
    needed: set[int] = set()              # groups a text inside relies on for a font property
    groups: list[int] = []
    for k, line in enumerate(lines):
        tag = line.strip()
        if tag.startswith("<g") and not tag.endswith("/>"):
            stack.append(k)
            groups.append(k)
        elif tag.startswith("</g>"):
            if stack:
                stack.pop()
        elif "<text" in tag and not all(f' {name}="' in tag for name in _FONT):
            needed.update(stack)
    for k in groups:
        if k not in needed:
            lines[k] = _FONT_ATTR.sub("", lines[k])
    return "\n".join(lines)


_GROUP_PAINT = re.compile(r'\s(?:fill|stroke|stroke-width|stroke-linecap|stroke-linejoin|stroke-opacity|fill-opacity|'
                          r'fill-rule|stroke-dasharray|stroke-dashoffset)="[^"]*"')


def _text_groups(svg: str) -> str:
    """Paint attributes of a ``<g>`` whose children are only texts that state their own fill and fill opacity
    and draw no stroke: nothing inside inherits them (Qt opens one such group per label; its transform stays)."""
    lines = svg.split("\n")
    k = 0
    while k < len(lines):
        tag = lines[k].strip()
        if tag.startswith("<g") and not tag.endswith("/>"):
            end = k + 1
            while end < len(lines) and lines[end].strip().startswith("<text"):
                end += 1
            texts = lines[k + 1:end]
            if (texts and end < len(lines) and lines[end].strip() == "</g>"
                    and all(' stroke="none"' in t and ' fill="' in t and ' fill-opacity="' in t for t in texts)):
                lines[k] = _GROUP_PAINT.sub("", lines[k])
            k = end
        else:
            k += 1
    return "\n".join(lines)


def _translations(svg: str) -> str:
    """``matrix(1,0,0,1,dx,dy)`` (Qt writes every offset as a matrix) as ``translate(dx,dy)``: the same transform."""
    svg = re.sub(r'\stransform="matrix\(1,0,0,1,0,0\)"', "", svg)
    return re.sub(r'transform="matrix\(1,0,0,1,([-\d.e]+),([-\d.e]+)\)"', r'transform="translate(\1,\2)"', svg)


_NUM = r"(-?[\d.]+(?:e-?\d+)?)"
_ROUNDED = re.compile(r'<path((?:\s[-\w:]+="[^"]*")*?)\s+d="(M[^"]*Z)\s*"((?:\s[-\w:]+="[^"]*")*)\s*/>')


def _rounded_rects(svg: str) -> str:
    """Qt's rounded rectangle (four corner curves joined by lines) as ``<rect rx ry>``: the box it draws."""
    def one(match: re.Match) -> str:
        rect = _rect_of(match.group(2))
        if rect is None:
            return match.group(0)
        x, y, w, h, rx, ry = (_short(v) for v in rect)
        attrs = re.sub(r'\sfill-rule="[^"]*"', "", match.group(1) + match.group(3))   # a rect has no inside-out
        return f'<rect{attrs} x="{x}" y="{y}" width="{w}" height="{h}" rx="{rx}" ry="{ry}"/>'
    return _ROUNDED.sub(one, svg)


def _rect_of(d: str) -> tuple[float, ...] | None:
    """(x, y, width, height, rx, ry) when ``d`` is exactly Qt's ``addRoundedRect`` path, else None."""
    commands = re.findall(r"([MCLZ])([^MCLZ]*)", d)
    if [c for c, _ in commands] != list("MCLCLCLCLZ"):
        return None
    try:
        pts = [[float(v) for v in re.findall(r"-?[\d.]+(?:e-?\d+)?", args)] for _, args in commands]
    except ValueError:
        return None
    if [len(p) for p in pts] != [2, 6, 2, 6, 2, 6, 2, 6, 2, 0]:
        return None
    (x, y0), c1, (x1, y), c2, (right, y1), c3, (x2, bottom), c4, (x3, y2), _ = pts
    rx, ry = c1[4] - x, y0 - c1[5]
    width, height = right - x, bottom - y
    same = lambda a, b: abs(a - b) < 0.02                              # noqa: E731  (Qt's 2-decimal writes)
    corners = (same(c1[4], x + rx) and same(c1[5], y) and same(c2[4], right) and same(c2[5], y + ry)
               and same(c3[4], right - rx) and same(c3[5], bottom) and same(c4[4], x) and same(c4[5], bottom - ry))
    lines = (same(x1, right - rx) and same(y1, bottom - ry) and same(x2, x + rx) and same(y2, y + ry)
             and same(x3, x) and same(y0, y + ry))
    if not (corners and lines and rx > 0 and ry > 0 and width > 0 and height > 0):
        return None
    return x, y, width, height, rx, ry


def _short(value: float) -> str:
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


_GRADIENT = re.compile(r'<linearGradient\b([^>]*?)\sid="([^"]+)"([^>]*)>(.*?)</linearGradient>\n?', re.S)


def _shared_gradients(svg: str) -> str:
    """A gradient written again with the same stops (Qt writes one per painter state that holds it) is
    dropped and its uses point at the first; stops lose ``stop-opacity="1"`` (the default) and keep 4 digits."""
    seen: dict[str, str] = {}
    renamed: dict[str, str] = {}

    def one(match: re.Match) -> str:
        attrs, ident, rest, stops = match.groups()
        stops = re.sub(r'\sstop-opacity="1"', "", stops)
        stops = re.sub(r'offset="([\d.]+)"', lambda m: f'offset="{float(m.group(1)):.4g}"', stops)
        stops = "".join(line.strip() for line in stops.split("\n"))
        key = attrs + rest + stops
        if key in seen:
            renamed[ident] = seen[key]
            return ""
        seen[key] = ident
        return f'<linearGradient{attrs} id="{ident}"{rest}>{stops}</linearGradient>\n'
    svg = _GRADIENT.sub(one, svg)
    for old, new in renamed.items():
        svg = svg.replace(f"url(#{old})", f"url(#{new})")
    return svg


def _unwrap_bare_groups(body: str) -> str:
    """``<g>`` with no attributes left (a label's group once its unused paint is gone) changes nothing: its
    children go to its parent."""
    out: list[str] = []
    bare: list[bool] = []               # for each open group: is it a bare one (dropped with its </g>)?
    for line in body.split("\n"):
        tag = line.strip()
        if tag.startswith("<g") and tag.endswith(">") and not tag.endswith("/>"):
            bare.append(tag == "<g>")
            if tag == "<g>":
                continue
        elif tag == "</g>" and bare and bare.pop():
            continue
        out.append(line)
    return "\n".join(out)


_TRANSLATE = re.compile(r'\stransform="translate\(([-\d.e]+),([-\d.e]+)\)"')
_LEAF = re.compile(r"<(text|rect|path|polyline|polygon)\b[^>]*(?:/>|>[^<]*</text>)$")


def _fold_translations(svg: str) -> str:
    """A group's ``translate(dx,dy)`` moved into its children's coordinates (Qt wraps every item drawn at an
    offset in its own translated group): x/y of texts and rects, every point of paths (absolute M/L/C/Q/S/T
    only), polylines and polygons. Groups painted with a gradient keep theirs (its user space moves with it)."""
    lines = svg.split("\n")
    k = 0
    while k < len(lines):
        tag = lines[k].strip()
        move = _TRANSLATE.search(tag) if tag.startswith("<g") and not tag.endswith("/>") else None
        if move is None or "url(" in tag:
            k += 1
            continue
        end = k + 1
        while end < len(lines) and _LEAF.match(lines[end].strip()):
            end += 1
        if end == k + 1 or end >= len(lines) or lines[end].strip() != "</g>":
            k = end
            continue
        dx, dy = float(move.group(1)), float(move.group(2))
        moved = [_shift(line, dx, dy) for line in lines[k + 1:end]]
        if all(m is not None for m in moved):
            lines[k + 1:end] = moved
            lines[k] = _TRANSLATE.sub("", lines[k])
        k = end
    return "\n".join(lines)


def _shift(line: str, dx: float, dy: float) -> str | None:
    """``line`` (one leaf element) drawn dx, dy further; None when it holds coordinates it cannot move."""
    if re.search(r'\s(?:transform|x1|x2|y1|y2|cx|cy)="', line):
        return None
    pair = lambda m: f"{_short(float(m.group(1)) + dx)},{_short(float(m.group(2)) + dy)}"     # noqa: E731
    point = re.compile(_NUM + r"," + _NUM)

    def path(m: re.Match) -> str:
        return f' d="{point.sub(pair, m.group(1))}"'
    if re.search(r'\sd="[^"]*[^MLCQSTZ\d\s,.e-][^"]*"', line):
        return None                                             # relative, arc or H/V commands: leave it
    line = re.sub(r'\sd="([^"]*)"', path, line)
    line = re.sub(r'\spoints="([^"]*)"', lambda m: f' points="{point.sub(pair, m.group(1))}"', line)
    line = re.sub(r'\sx="' + _NUM + '"', lambda m: f' x="{_short(float(m.group(1)) + dx)}"', line)
    line = re.sub(r'\sy="' + _NUM + '"', lambda m: f' y="{_short(float(m.group(1)) + dy)}"', line)
    return line


# inherited properties and the initial value SVG gives each (None: depends on the reader, never dropped
# unless an enclosing group states the same value)
_INHERITED = {"fill-opacity": "1", "stroke-opacity": "1", "font-style": "normal", "font-weight": "400",
              "stroke-dashoffset": "0", "fill-rule": "nonzero", "stroke-width": "1", "stroke-linecap": "butt",
              "stroke-linejoin": "miter", "stroke-dasharray": "none", "stroke": "none", "fill": None,
              "font-family": None, "font-size": None}
_INHERITED_ATTR = re.compile(r'\s(' + "|".join(_INHERITED) + r')="([^"]*)"')


def _drop_defaults(svg: str) -> str:
    """Attributes of inherited properties stating the value the element inherits anyway: the nearest enclosing
    group's, or the initial value where no group sets it (Qt restates every property on every group)."""
    lines = svg.split("\n")
    stack: list[dict[str, str]] = []        # what each open group sets
    for k, line in enumerate(lines):
        tag = line.strip()
        if tag.startswith("</g"):
            if stack:
                stack.pop()
            continue
        if not tag.startswith("<") or tag.startswith(("<?", "<!", "</", "<svg", "<stop", "<linearGradient")):
            continue
        found = dict(_INHERITED_ATTR.findall(tag))

        def keep(m: re.Match) -> str:
            name, value = m.group(1), m.group(2)
            inherited = next((group[name] for group in reversed(stack) if name in group), _INHERITED[name])
            return "" if value == inherited else m.group(0)
        lines[k] = _INHERITED_ATTR.sub(keep, line)
        if tag.startswith("<g") and not tag.endswith("/>"):
            stack.append(found)
    return "\n".join(lines)
