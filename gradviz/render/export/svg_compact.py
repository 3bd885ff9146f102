"""The same SVG in fewer bytes, for notebooks: Qt's SVG writer repeats every style on every element.

``QSvgGenerator`` writes each painter state as a ``<g>`` and each text with its full font again
(``font-family="Inter,Segoe UI,Helvetica Neue,..." font-size="11" font-weight="400" ...``): two thirds
of a drawing's bytes. ``compact_svg`` rewrites it without changing what any element draws:

- each distinct value of the style attributes Qt repeats (font family, size, weight and style, line
  caps and joins, opacities) becomes one CSS class (``.a``, ``.b`` ...) in a ``<style>`` block, and an
  element carries the classes of its values: a class rule sets exactly that property on exactly that
  element, as the attribute did (nothing is inherited that was not before);
- coordinates are written to 0.01 of a pixel (Qt writes 4 to 6 digits: 68.8954), far below what a
  screen or printer shows;
- identity transforms (``matrix(1,0,0,1,0,0)``) and ``vector-effect="none"`` (the default; not inherited)
  are dropped; ``xml:space="preserve"`` is dropped from texts that hold no whitespace it would keep;
- a group's font attributes are dropped when every text inside it states its own (Qt's texts always
  do; fonts draw nothing else); groups left with no children are dropped, a group closed and reopened with the same attributes is
  one group; runs of blank lines are collapsed.

The notebook stores this once per output (``gradviz/notebook.py``); ``gradviz export x.svg`` keeps
Qt's plain attributes (some SVG readers, Qt's own among them, ignore CSS classes).
"""
from __future__ import annotations

import re

__all__ = ["compact_svg"]

STYLED = ("font-family", "font-size", "font-weight", "font-style", "stroke-linecap", "stroke-linejoin",
          "fill-opacity", "stroke-opacity")
_ATTR = re.compile(r'\s(' + "|".join(STYLED) + r')="([^"<>]*)"')
_TAG = re.compile(r"<(?!/|\?|!)([A-Za-z]+)((?:\s+[A-Za-z_:][-\w:.]*=\"[^\"]*\")*)\s*(/?)>", re.S)
_IDENTITY = re.compile(r'\s(?:transform="matrix\(1,0,0,1,0,0\)"|vector-effect="none")')
_PLAIN_TEXT = re.compile(r'(<text\b[^>]*?)\sxml:space="preserve"([^>]*>)([^<]*)(</text>)')
_NUMBER_ATTR = re.compile(r'\s(d|points|x|y|x1|y1|x2|y2|width|height|cx|cy|r|rx|ry)="([^"]*)"')
_DECIMALS = re.compile(r"(-?\d+)\.(\d{3,})")
_BETWEEN = re.compile(r'\s+(?=[A-Za-z_:][-\w:.]*=")')
_EMPTY_GROUP = re.compile(r"<g(?:\s+[A-Za-z_:][-\w:.]*=\"[^\"]*\")*\s*>\s*</g>", re.S)


def compact_svg(svg: str) -> str:
    """``svg`` (Qt's writer) with repeated style attributes as CSS classes; unchanged if it has classes or styles."""
    if " class=" in svg or "<style" in svg or "<svg" not in svg:
        return svg
    classes: dict[tuple, str] = {}

    def tag(match: re.Match) -> str:
        name, attrs, close = match.group(1), match.group(2), match.group(3)
        attrs = _IDENTITY.sub("", attrs)
        found = _ATTR.findall(attrs)
        if found and name != "svg":
            names = " ".join(classes.setdefault(pair, _name(len(classes))) for pair in found)
            attrs = _ATTR.sub("", attrs) + f' class="{names}"'
        attrs = _NUMBER_ATTR.sub(_round_numbers, attrs)
        attrs = _BETWEEN.sub(" ", attrs).strip()       # whitespace between attributes, never inside a value
        return f"<{name}{' ' + attrs if attrs else ''}{close}>"

    flat = _TAG.sub(lambda m: f"<{m.group(1)} {' '.join(m.group(2).split())}{m.group(3)}>".replace(" >", ">")
                    .replace(" /", "/"), _PLAIN_TEXT.sub(_plain_text, svg))   # one tag, one line
    body = _TAG.sub(tag, _drop_group_fonts(flat))
    previous = None
    while previous != body:
        previous, body = body, _EMPTY_GROUP.sub("", body)
    body = _merge_groups(re.sub(r"\n\s*\n+", "\n", body))
    if not classes:
        return body
    rules = "".join(f".{cls}{{{_rule(*pair)}}}" for pair, cls in classes.items())
    end = body.index(">", body.index("<svg")) + 1
    return f"{body[:end]}\n<style>{rules}</style>{body[end:]}"


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
