"""Streaming parser for PubMed / MEDLINE citation XML.

Handles both shapes found in the wild:

* ``<PubmedArticleSet><PubmedArticle><MedlineCitation>…`` (current baseline/update files)
* ``<MedlineCitationSet><MedlineCitation>…`` (older MEDLINE dumps)

The fields we read are extracted from the bytes of each ``<MedlineCitation>`` element without
building a tree: ``bytes.find`` on the literal tag names and a few compiled patterns inside one
citation. Building element trees was two thirds of parse time with lxml, and half of every
current file (``<PubmedData>``, author lists) is never read at all; without trees a single core
parses about twice as fast (``bench/ingest.py`` prints the rate and the ratio to
``pubmedparser2``'s C). Inline markup (``<i>``, ``<sup>``, MathML) is flattened to its text,
the five XML entities and character references are decoded, whitespace is collapsed.

Memory stays flat in file size: the buffer holds one read chunk and at most one citation.

What is checked, since no XML parser validates the whole file: from each citation's start tag
to the next one's there is exactly one closing tag; deletion blocks close; the file ends with
the root's closing tag; the declared encoding is UTF-8. A citation
whose own content is broken (no PMID, an unclosed field, bad UTF-8, an undefined entity) is
yielded as a :class:`MalformedCitation` and the file goes on. Markup outside citations is not
validated (nothing there is read). A truncated or malformed file does not lose what came before
the fault: every complete citation is yielded, then :class:`PubmedParseError` is raised with
the reason, so the caller can keep the good part, mark the file partial and fail loudly.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lxml import etree

from mosaic_core.data.compressed import READ_ERRORS as _READ_ERRORS
from mosaic_core.data.compressed import read_chunks

_MONTHS = {
    m: i
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1
    )
}


class PubmedParseError(Exception):
    """The XML stream broke off or is malformed; records before the fault were yielded."""

    def __init__(self, path: str, message: str, records_before: int):
        super().__init__(
            f"{path}: {message} (after {records_before} complete citations). The file is "
            "truncated or corrupt: re-download it (delete the local copy) or exclude it."
        )
        self.path = path
        self.reason = message
        self.records_before = records_before


@dataclass(slots=True)
class Citation:
    """One MedlineCitation, with text fields exactly as the XML gives them (markup kept as text)."""

    pmid: int
    version: int
    title: str
    abstract_sections: list[str]
    abstract_labels: list[str]
    journal: str
    keywords: list[str]
    mesh_headings: list[str]
    publication_types: list[str]
    languages: list[str]
    vernacular_title: str
    pub_date: str
    pub_year: int | None
    record_index: int

    def abstract(self, prefix_labels: bool = False, sep: str = " ") -> str:
        """All AbstractText sections joined in document order.

        With ``prefix_labels`` each labelled section reads ``"LABEL: text"``.
        """
        if not prefix_labels:
            return sep.join(s for s in self.abstract_sections if s)
        return sep.join(
            f"{label}: {text}" if label else text
            for label, text in zip(self.abstract_labels, self.abstract_sections, strict=True)
            if text
        )


@dataclass(slots=True)
class MalformedCitation:
    """A citation whose own content is broken (no PMID, a field that never closes, bytes that
    are not UTF-8, an undefined entity); the citations around it are unaffected."""

    record_index: int
    reason: str


@dataclass
class DeletedPmids:
    """PMIDs listed in the file's ``<DeleteCitation>`` block(s)."""

    pmids: list[int] = field(default_factory=list)


class _BadRecord(Exception):
    """A citation's own content is broken; the file itself may still be fine."""


_TAG = re.compile(rb"<[^>]*>")
_COMMENT = re.compile(rb"<!--.*?-->", re.S)
_X_START_TAG = re.compile(rb"""<(?:[^"'>]|"[^"]*"|'[^']*')*>""")
_ENTITY = re.compile(r"&([^;&\s]*);")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


def _entity(m: re.Match) -> str:
    name = m.group(1)
    if name in _NAMED:
        return _NAMED[name]
    try:
        code = int(name[2:], 16) if name[:2] == "#x" else int(name[1:]) if name[:1] == "#" else -1
    except ValueError:
        code = -1
    # XML 1.0's Char production: a reference to anything else is not well-formed.
    if code in (0x9, 0xA, 0xD) or 0x20 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or 0x10000 <= code <= 0x10FFFF:
        return chr(code)
    raise _BadRecord(f"undefined entity or invalid character reference &{name};")


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8")  # UnicodeDecodeError: a malformed citation (see _citation)
    return _ENTITY.sub(_entity, text) if "&" in text else text


def _text(raw: bytes) -> str:
    """Text content of an element's inner bytes: inline markup (<i>, <sup>, MathML…) flattened,
    entities decoded, runs of whitespace collapsed to one space (what pretty-printing leaks
    into mixed content), ends stripped. Most texts hold no space but single ASCII ones, and
    ``isprintable()`` says so in one pass (every other space is a Unicode separator or a
    control character), so they skip the split."""
    text = _decode(_flatten(raw) if b"<" in raw else raw)
    if text.isprintable() and "  " not in text:
        return text.strip()
    return " ".join(text.split())


def _flatten(raw: bytes) -> bytes:
    """``raw`` without its markup: tags and comments go, their text stays."""
    if b"<!" in raw:
        if b"<![CDATA[" in raw:  # never in PubMed; its text would need escaping rules of its own
            raise _BadRecord("a CDATA section (PubMed XML has none; this reader does not read them)")
        raw = _COMMENT.sub(b"", raw)
    return _TAG.sub(b"", raw)


def _texts(raws: list[bytes]) -> list[str]:
    """:func:`_text` of each of many short items (MeSH terms, keywords…), the non-empty ones.
    Items without markup, entities or odd spaces (nearly all) are decoded in one call, joined
    by "<" (which no text holds raw)."""
    joined = b"<".join(raws)
    if b"&" not in joined and joined.count(b"<") == len(raws) - 1:
        text = joined.decode("utf-8")
        if text.isprintable() and "  " not in text:
            return [t for t in (t.strip() for t in text.split("<")) if t]
    return [t for t in map(_text, raws) if t]


def _inner(r: bytes, tag: tuple[bytes, bytes], start: int, end: int) -> tuple[bytes, bytes, int] | None:
    """(start tag's attributes, content, end of the element) of the first element ``tag``
    (``(b"<Name", b"</Name>")``) in ``r[start:end]``, or None. Elements read this way never
    nest in themselves."""
    opening, close = tag
    n = len(opening)
    while True:
        i = r.find(opening, start, end)
        if i < 0:
            return None
        j = r.find(b">", i, end)
        if j > i + n and (r.count(b'"', i, j) % 2 or r.count(b"'", i, j) % 2):
            j = m.end() - 1 if (m := _X_START_TAG.match(r, i, end)) else -1  # ">" in a quoted value
        if j < 0:
            raise _BadRecord(f"{opening.decode()}> start tag never closes")
        if r[i + n] in _NAME_END:
            break
        start = j  # a longer name, e.g. <TitleX>
    if r[j - 1] == 0x2F:  # "/>": empty element
        return r[i + n : j - 1], b"", j + 1
    k = r.find(close, j, end)
    if k < 0:
        raise _BadRecord(f"{opening.decode()}> is never closed")
    return r[i + n : j], r[j + 1 : k], k + len(close)


def _tag(name: str) -> tuple[bytes, bytes]:
    return f"<{name}".encode(), f"</{name}>".encode()


_PMID, _ARTICLE_TITLE, _ABSTRACT_TEXT = _tag("PMID"), _tag("ArticleTitle"), _tag("AbstractText")


def _plain(r: bytes, opening: bytes, closing: bytes, start: int, end: int) -> tuple[bytes, int] | None:
    """(content, end) of the first ``opening…closing`` element in ``r[start:end]`` whose start
    tag is exactly ``opening`` (an element the DTD gives no attributes), or None."""
    i = r.find(opening, start, end)
    if i < 0:
        return None
    i += len(opening)
    k = r.find(closing, i, end)
    if k < 0:
        raise _BadRecord(f"{opening.decode()} is never closed")
    return r[i:k], k + len(closing)


def _attribute(attrs: bytes, pattern: re.Pattern) -> str | None:
    if not attrs or (m := pattern.search(attrs)) is None:
        return None
    value = m.group(1) if m.group(1) is not None else m.group(2)
    return _decode(value).translate(_ATTR_SPACE)


_ATTR_SPACE = str.maketrans("\t\n\r", "   ")  # XML attribute-value normalisation
_NAME_END = frozenset(b" >/\t\n\r")
_X_VERSION = re.compile(rb"""\sVersion\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_X_LABEL = re.compile(rb"""\sLabel\s*=\s*(?:"([^"]*)"|'([^']*)')""")
# Repeated fields, read with one pattern each; a name followed by a space, ">" or "/>" only,
# so <PublicationType> never matches <PublicationTypeList>.
_X_LANGUAGE = re.compile(rb"<Language(?:\s[^>]*)?>(.*?)</Language>", re.S)
_X_PUBLICATION_TYPE = re.compile(rb"<PublicationType(?:\s[^>]*)?>(.*?)</PublicationType>", re.S)
_X_KEYWORD = re.compile(rb"<Keyword(?:\s[^>]*)?>(.*?)</Keyword>", re.S)
_X_MESH = re.compile(rb"<DescriptorName(?:\s[^>]*)?>([^<]*)</DescriptorName>")  # never marked up
_X_DELETED_PMID = re.compile(rb"<PMID(?:\s[^>]*)?>\s*(\d+)\s*</PMID>")


def _pub_date(raw: bytes) -> tuple[str, int | None]:
    """``YYYY[-MM[-DD]]`` and the year from a ``<PubDate>``'s content, or its free-text
    ``<MedlineDate>`` ("1998 Dec-1999 Jan") and the year it starts with."""
    text = _decode(raw)
    if m := _X_PUB_DATE.match(text):
        year, month, day = m.groups("")
        mo = int(month) if month.isdigit() else _MONTHS.get(month[:3].lower())
        date = year if not mo else f"{year}-{mo:02d}-{int(day):02d}" if day.isdigit() else f"{year}-{mo:02d}"
        return date, int(year) if year.isdigit() else None
    medline = _X_MEDLINE_DATE.search(text)
    date = medline.group(1) if medline else ""
    return date, int(date[:4]) if date[:4].isdigit() else None


# The DTD's PubDate: (Year, ((Month, Day?) | Season)?) | MedlineDate; values come stripped.
_X_PUB_DATE = re.compile(
    r"\s*<Year>\s*([^<]*?)\s*</Year>\s*(?:<Month>\s*([^<]*?)\s*</Month>\s*(?:<Day>\s*([^<]*?)\s*</Day>)?)?"
)
_X_MEDLINE_DATE = re.compile(r"<MedlineDate>\s*([^<]*?)\s*</MedlineDate>")


def _citation(r: bytes, index: int) -> Citation | MalformedCitation:
    """The fields of one ``<MedlineCitation>…</MedlineCitation>`` (its bytes, both tags included)."""
    try:
        return _read_citation(r, index)
    except _BadRecord as exc:
        return MalformedCitation(index, str(exc))
    except UnicodeDecodeError as exc:
        return MalformedCitation(index, f"invalid UTF-8: {exc}")


def _read_citation(r: bytes, index: int) -> Citation | MalformedCitation:
    # Searches run forward in the NLM DTD's element order (PMID, Article: Journal (PubDate,
    # Title), ArticleTitle, Abstract, Language, PublicationTypeList, VernacularTitle; then
    # MeshHeadingList and KeywordList), each bounded by the element that holds it, so each
    # byte is scanned about once, by bytes.find.
    end = len(r)
    a = r.find(b"<Article")
    while a >= 0 and r[a + 8] not in _NAME_END:
        a = r.find(b"<Article", a + 8)
    if a < 0:
        a = a_end = end
    elif (a_end := r.find(b"</Article>", a)) < 0:
        raise _BadRecord("<Article> is never closed")
    pmid = _inner(r, _PMID, 0, a)  # the citation's own PMID comes before its Article
    pmid_txt = pmid[1].strip() if pmid else b""
    if not pmid_txt.isdigit():
        return MalformedCitation(index, f"missing or non-numeric PMID {pmid_txt.decode('utf-8', 'replace')!r}")
    attrs = pmid[0]
    version = 1 if attrs == b' Version="1"' else int(v) if (v := _attribute(attrs, _X_VERSION) or "1").isdigit() else 1
    c = Citation(int(pmid_txt), version, "", [], [], "", [], [], [], [], "", "", None, index)
    pos = a_end
    if (mesh := r.find(b"<MeshHeadingList", pos)) >= 0:
        if (pos := r.find(b"</MeshHeadingList>", mesh)) < 0:
            raise _BadRecord("<MeshHeadingList> is never closed")
        c.mesh_headings = _texts(_X_MESH.findall(r, mesh, pos))
    if (keywords := r.find(b"<KeywordList", pos)) >= 0:
        c.keywords = _texts(_X_KEYWORD.findall(r, keywords, r.rfind(b"</KeywordList>")))
    if a == end:
        return c
    pos = a
    if pub_date := _plain(r, b"<PubDate>", b"</PubDate>", pos, a_end):
        c.pub_date, c.pub_year = _pub_date(pub_date[0])
        pos = pub_date[1]
    if journal := _plain(r, b"<Title>", b"</Title>", pos, a_end):
        c.journal = _text(journal[0])
        pos = journal[1]
    if title := _inner(r, _ARTICLE_TITLE, pos, a_end):
        c.title = _text(title[1])
        pos = title[2]
    if abstract := _plain(r, b"<Abstract>", b"</Abstract>", pos, a_end):
        body, at = abstract[0], 0
        while section := _inner(body, _ABSTRACT_TEXT, at, len(body)):
            c.abstract_sections.append(_text(section[1]))
            c.abstract_labels.append(_attribute(section[0], _X_LABEL) or "")
            at = section[2]
        pos = abstract[1]
    if (language := r.find(b"<Language", pos, a_end)) >= 0:
        if (pos := r.rfind(b"</Language>", language, a_end)) < 0:
            raise _BadRecord("<Language> is never closed")
        c.languages = _texts(_X_LANGUAGE.findall(r, language, pos + 11))
    if types := _plain(r, b"<PublicationTypeList>", b"</PublicationTypeList>", pos, a_end):
        c.publication_types = _texts(_X_PUBLICATION_TYPE.findall(types[0]))
        pos = types[1]
    if vernacular := _plain(r, b"<VernacularTitle>", b"</VernacularTitle>", pos, a_end):
        c.vernacular_title = _text(vernacular[0])
    return c


class _BadFile(Exception):
    """The file's structure is broken: nothing after this point can be trusted."""


_OPEN = b"<MedlineCitation"
_CLOSE = b"</MedlineCitation>"
_DELETE_OPEN = b"<DeleteCitation"
_DELETE_CLOSE = b"</DeleteCitation>"
_ROOT_CLOSE = (b"</PubmedArticleSet>", b"</MedlineCitationSet>")
_TAIL = 64
_ORPHAN_CLOSE = "a </MedlineCitation> without its start tag (damaged markup)"
_X_ENCODING = re.compile(rb"""<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


def _find_open(buf: bytes, pos: int) -> int:
    """Where the next ``<MedlineCitation`` start tag begins, -1 if none is known yet (the older
    root ``<MedlineCitationSet>`` is not one; a name cut by the buffer's end is not decided)."""
    i = buf.find(_OPEN, pos)
    while i >= 0:
        n = i + len(_OPEN)
        if n >= len(buf):
            return -1
        if buf[n] != 0x53:  # "S"
            return i
        i = buf.find(_OPEN, n)
    return i


def _elements(chunks: Iterator[bytes]) -> Iterator[tuple[bool, bytes]]:
    """``(is_citation, bytes)`` of every ``<MedlineCitation>`` and ``<DeleteCitation>``
    element, in document order, each cut out of the stream whole.

    The stretch from one citation's start tag to the next one's must hold exactly one
    ``</MedlineCitation>``: none means the citation is cut or its closing tag damaged, two
    mean a damaged start tag (a citation would be lost). Raises :class:`_BadFile` when the
    structure is broken, after yielding every element before the damage. An error reading
    the stream (a cut or corrupt ``.gz``) is raised after every element complete before it.
    """
    upstream: Exception | None = None

    def guarded() -> Iterator[bytes]:
        nonlocal upstream
        try:
            yield from chunks
        except _READ_ERRORS as exc:
            upstream = exc

    buf = b""
    first = leading = True
    for chunk in itertools.chain(guarded(), [None]):
        at_end = chunk is None
        if not at_end:
            buf += chunk
            if first and buf:
                first = False
                m = _X_ENCODING.match(buf.lstrip())
                if m and m.group(1).lower() not in (b"utf-8", b"utf8", b"us-ascii"):
                    raise _BadFile(f"the file declares encoding {m.group(1).decode()!r}; PubMed XML is UTF-8")
        pos = 0
        deletion = buf.find(_DELETE_OPEN)
        start = _find_open(buf, 0)
        while True:
            if deletion >= 0 and (start < 0 or deletion < start):
                close = buf.find(_DELETE_CLOSE, deletion)
                if close < 0:
                    if at_end:
                        raise upstream or _BadFile("the file ends inside a <DeleteCitation> block (truncated)")
                    pos = deletion
                    break
                pos = close + len(_DELETE_CLOSE)
                yield False, buf[deletion:pos]
                deletion = buf.find(_DELETE_OPEN, pos)
                continue
            if start < 0:
                # Keep a tail that could hold a start tag cut by the chunk's end, or the root's
                # closing tag (checked at the end); what is dropped holds no citation.
                if buf.find(_CLOSE, pos) >= 0:
                    raise _BadFile(_ORPHAN_CLOSE)
                pos = max(pos, len(buf.rstrip()) - _TAIL)
                break
            following = _find_open(buf, start + len(_OPEN))
            if following < 0 and not at_end:
                pos = start  # the stretch to the next citation is not all here yet
                break
            bound = len(buf) if following < 0 else following
            if start < deletion < bound:
                bound = deletion
            if leading and buf.find(_CLOSE, 0, start) >= 0:  # before the first citation
                raise _BadFile(_ORPHAN_CLOSE)
            leading = False
            close = buf.find(_CLOSE, start, bound)
            if close < 0:
                if following < 0 and deletion < start:
                    raise upstream or _BadFile("the file ends inside a citation (truncated)")
                raise _BadFile("a citation does not close before the next begins (damaged markup)")
            end = close + len(_CLOSE)
            yield True, buf[start:end]
            if buf.find(_CLOSE, end, bound) >= 0:
                raise _BadFile(_ORPHAN_CLOSE)
            pos, start = end, following
        buf = buf[pos:]
    if upstream is not None:
        raise upstream
    if not buf.rstrip().endswith(_ROOT_CLOSE):
        raise _BadFile("the file ends before its root element closes (truncated)")


def iter_citations(
    path: str | Path, deleted: DeletedPmids | None = None
) -> Iterator[Citation | MalformedCitation]:
    """Yield every citation of a PubMed/MEDLINE XML file in document order.

    ``deleted`` (if given) collects the PMIDs of ``<DeleteCitation>`` blocks as they are
    met. Raises :class:`PubmedParseError` after yielding every complete citation if the
    stream is truncated or malformed.
    """
    count = 0
    try:
        for is_citation, raw in _elements(read_chunks(path)):
            if is_citation:
                count += 1
                yield _citation(raw, count - 1)
            elif deleted is not None:
                deleted.pmids.extend(int(p) for p in _X_DELETED_PMID.findall(raw))
    except (_BadFile, *_READ_ERRORS) as exc:
        _check_root(path, count, deleted)
        raise PubmedParseError(str(path), f"{type(exc).__name__.lstrip('_')}: {exc}", count) from exc
    _check_root(path, count, deleted)


def _check_root(path: str | Path, count: int, deleted: DeletedPmids | None) -> None:
    """An XML file with neither citations nor deletions is almost certainly the wrong file."""
    if count == 0 and not (deleted and deleted.pmids):
        root_tag = _root_tag(path)
        if root_tag not in ("PubmedArticleSet", "MedlineCitationSet"):
            raise PubmedParseError(
                str(path), f"root element is <{root_tag}>, not PubmedArticleSet/MedlineCitationSet", 0
            )


def _root_tag(path: str | Path) -> str:
    parser = etree.XMLPullParser(events=("start",), load_dtd=False, no_network=True, recover=True)
    for data in read_chunks(path):
        parser.feed(data)
        for _, elem in parser.read_events():
            return str(elem.tag)
    return ""
