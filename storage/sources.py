"""Snapshot sources: list the files of a PubMed snapshot and bring each one onto local disk.

A source is one of

* a local directory (its ``*.xml``/``*.xml.gz`` files, or its ``baseline/`` and
  ``updatefiles/`` folders when it mirrors NCBI's tree), a glob, or a single file;
* an HTTP(S) base URL laid out like ``https://ftp.ncbi.nlm.nih.gov/pubmed/``: directory
  listings under ``baseline/`` and ``updatefiles/``, each ``pubmedYYnNNNN.xml.gz`` with an
  ``.md5`` sidecar.

Downloads stream into a temporary file beside the destination while the MD5 is computed,
are compared with the sidecar, and only then renamed into place: a file under ``raw/``
is always a complete, verified download.
"""

from __future__ import annotations

import glob as globlib
import hashlib
import html.parser
import http.client
import importlib.metadata
import logging
import os
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Literal
from pathlib import Path

from storage.layout import DataLayout, file_sequence, partition_name

log = logging.getLogger(__name__)

SUBSETS = ("baseline", "updatefiles")
_XML_NAME = re.compile(r"\.xml(\.gz)?$")
# What a remote listing may name: NCBI's own file names (``pubmed26n0001.xml.gz``, the
# ``medline`` shape of older snapshots). Checked after percent-decoding, so an encoded
# ``../`` or ``/`` in a hostile or broken listing never reaches a path under raw/.
_PUBMED_FILE = re.compile(r"(?:pubmed|medline)\d{2}n\d{4}\.xml(?:\.gz)?")
_MD5_HEX = re.compile(r"\b([0-9a-fA-F]{32})\b")
_USER_AGENT = f"mosaic/{importlib.metadata.version('mosaic')}"  # no project URL to name yet


class SourceError(Exception):
    """A snapshot source cannot be used as given (bad path, missing file, 404)."""


class TransientDownloadError(SourceError):
    """A download failed in a way a retry can fix (timeout, reset, 5xx, bad checksum)."""


class ChecksumMismatch(TransientDownloadError):
    """The bytes received do not match the published ``.md5``."""


@dataclass(frozen=True)
class SourceFile:
    """One file of a snapshot, before it is fetched."""

    name: str
    location: str  # absolute local path or URL
    subset: str  # "baseline", "updatefiles" or "local"

    @property
    def partition(self) -> str:
        return partition_name(self.name)

    @property
    def file_seq(self) -> int:
        return file_sequence(self.name)

    @property
    def is_remote(self) -> bool:
        return self.location.startswith(("http://", "https://"))


@dataclass(frozen=True)
class LocalFile:
    """A snapshot file on local disk whose MD5 is known (and verified where published)."""

    source: SourceFile
    path: str
    md5: str


def is_remote(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def list_source(
    source: str, subsets: tuple[str, ...] = SUBSETS, timeout: float = 60.0
) -> list[SourceFile]:
    """All XML files of a source, in snapshot order (baseline before updates, by number)."""
    files = _list_remote(source, subsets, timeout) if is_remote(source) else _list_local(source, subsets)
    files.sort(key=lambda f: (f.file_seq, f.subset != "baseline", f.name))
    names = [f.partition for f in files]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SourceError(
            f"{source}: several files map to the same partition {dupes[:5]} "
            "(e.g. both x.xml and x.xml.gz): keep one of each."
        )
    return files


def _list_local(source: str, subsets: tuple[str, ...]) -> list[SourceFile]:
    path = Path(source).expanduser()
    if path.is_file():
        return [SourceFile(path.name, str(path.resolve()), "local")]
    if path.is_dir():
        mirrored = [path / s for s in subsets if (path / s).is_dir()]
        if mirrored:
            return [
                SourceFile(p.name, str(p.resolve()), d.name)
                for d in mirrored
                for p in sorted(d.iterdir())
                if _XML_NAME.search(p.name) and p.is_file()
            ]
        candidates = sorted(path.iterdir())
    elif globlib.has_magic(source):
        candidates = [Path(p) for p in sorted(globlib.glob(os.path.expanduser(source)))]
    else:
        raise SourceError(
            f"source {source!r} is neither an existing file/directory, a glob, nor an http(s) URL"
        )
    files = [
        SourceFile(p.name, str(p.resolve()), "local")
        for p in candidates
        if p.is_file() and _XML_NAME.search(p.name)
    ]
    if not files:
        raise SourceError(f"source {source!r} holds no *.xml or *.xml.gz files")
    return files


def _http_get(url: str, timeout: float) -> http.client.HTTPResponse:
    req = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    try:
        return urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 (http/https only)
    except urllib.error.HTTPError as exc:
        if exc.code in (408, 425, 429) or exc.code >= 500:
            raise TransientDownloadError(f"GET {url}: HTTP {exc.code} {exc.reason}") from exc
        raise SourceError(f"GET {url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, socket.timeout, ConnectionError) as exc:
        raise TransientDownloadError(f"GET {url}: {exc}") from exc


def _list_remote(base: str, subsets: tuple[str, ...], timeout: float) -> list[SourceFile]:
    base = base if base.endswith("/") else base + "/"
    files, missing = [], []
    for subset in subsets:
        url = urllib.parse.urljoin(base, subset + "/")
        try:
            resp = _http_get(url, timeout)
        except TransientDownloadError:
            raise
        except SourceError as exc:  # e.g. a mirror with no updatefiles/ yet
            log.warning("%s: skipping subset %s (%s)", base, subset, exc)
            missing.append(str(exc))
            continue
        with resp:
            page = resp.read()
        names = _listed_names(_hrefs(page.decode("utf-8", "replace")), url)
        files += [SourceFile(n, urllib.parse.urljoin(url, n), subset) for n in names]
    if len(missing) == len(subsets):
        raise SourceError(f"{base}: none of {', '.join(subsets)} could be listed: {'; '.join(missing)}")
    return files


def _listed_names(hrefs: list[str], url: str) -> list[str]:
    """The PubMed file names a listing links to; anything else that looks like XML is skipped, loudly.

    A listing is untrusted input: its names become paths under raw/, so only names of NCBI's
    shape are taken, checked after decoding (``..%2Fx.xml.gz`` decodes to ``../x.xml.gz``).
    """
    names, skipped = set(), set()
    for href in hrefs:
        tail = href.rsplit("/", 1)[-1]
        name = urllib.parse.unquote(tail)
        if _PUBMED_FILE.fullmatch(name):
            names.add(name)
        elif _XML_NAME.search(tail) or _XML_NAME.search(name):
            skipped.add(name)
    if skipped:
        shown = sorted(skipped)
        log.warning(
            "%s: skipped %d listed file(s) that are not PubMed file names (pubmedYYnNNNN.xml.gz): %s%s",
            url, len(shown), ", ".join(repr(n) for n in shown[:10]), " ..." if len(shown) > 10 else "",
        )
    return sorted(names)


def raw_path(layout: DataLayout, subset: str, name: str) -> Path:
    """Where a download of ``name`` lives under raw/; a SourceError if it would land anywhere else."""
    raw = layout.raw_dir.resolve()
    dest = (raw / subset / name).resolve()
    if name in ("", ".", "..") or Path(name).name != name or raw not in dest.parents:
        raise SourceError(
            f"refusing to write {name!r} (subset {subset!r}): it would land at {dest}, outside {raw}; "
            "the source's listing is broken or hostile: use an NCBI mirror or a local copy."
        )
    return dest


class _LinkParser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def _hrefs(page: str) -> list[str]:
    """Link targets of a directory-listing page (Apache/nginx autoindex, NCBI's)."""
    parser = _LinkParser()
    parser.feed(page)
    return parser.hrefs


def md5_of(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.md5()  # noqa: S324 (integrity check against NCBI's published MD5)
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _parse_md5(text: str, where: str) -> str:
    m = _MD5_HEX.search(text)
    if m is None:
        raise SourceError(f"{where}: no MD5 digest found in {text[:100]!r}")
    return m.group(1).lower()


def _published_md5(source: SourceFile, timeout: float, sidecar: str) -> str | None:
    """The MD5 the ``.md5`` sidecar of ``source`` publishes; None when ``sidecar`` is optional and
    the server has none (HTTP 404 and the like)."""
    try:
        with _http_get(source.location + ".md5", timeout) as resp:
            return _parse_md5(resp.read().decode("utf-8", "replace"), source.location + ".md5")
    except TransientDownloadError:
        raise
    except SourceError:
        if sidecar == "required":
            raise
        return None


def fetch(source: SourceFile, layout: DataLayout, timeout: float = 120.0,
          sidecar: Literal["required", "optional"] = "required") -> LocalFile:
    """Bring ``source`` onto local disk, verified; reuse a verified earlier download. A snapshot
    file's ``.md5`` sidecar is ``required``; where it is ``optional`` (a glossary) and the server
    publishes none, an earlier complete download is reused as it is."""
    if not source.is_remote:
        return _fetch_local(source)
    dest = raw_path(layout, source.subset, source.name)  # checked before any byte is fetched or written
    expected = _published_md5(source, timeout, sidecar)
    if dest.exists():
        if expected is None:
            log.info("%s: already downloaded (the server publishes no MD5 to check it against)", source.name)
            return LocalFile(source, str(dest), md5_of(dest))
        if md5_of(dest) == expected:
            log.info("%s: already downloaded and verified", source.name)
            return LocalFile(source, str(dest), expected)
        log.warning("%s: local copy does not match the published MD5; downloading again", dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.part")
    h = hashlib.md5()  # noqa: S324
    try:
        with _http_get(source.location, timeout) as resp, open(tmp, "wb") as out:
            while block := resp.read(1 << 20):
                h.update(block)
                out.write(block)
        if expected is not None and h.hexdigest() != expected:
            raise ChecksumMismatch(
                f"{source.location}: MD5 {h.hexdigest()} does not match the published {expected}"
            )
        os.replace(tmp, dest)
    except (http.client.IncompleteRead, ConnectionError, socket.timeout) as exc:
        raise TransientDownloadError(f"{source.location}: download broke off: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    log.info("%s: downloaded %d bytes, %s", source.name, dest.stat().st_size,
             "MD5 verified" if expected else "no MD5 published to verify it")
    return LocalFile(source, str(dest), expected or h.hexdigest())


def _fetch_local(source: SourceFile) -> LocalFile:
    path = Path(source.location)
    if not path.is_file():
        raise SourceError(f"{path}: file vanished since the source was listed")
    digest = md5_of(path)
    sidecar = Path(source.location + ".md5")
    if sidecar.is_file():
        expected = _parse_md5(sidecar.read_text(errors="replace"), str(sidecar))
        if digest != expected:
            raise SourceError(
                f"{path}: MD5 {digest} does not match its sidecar {sidecar.name} ({expected}); "
                "the file is corrupt or truncated: fetch it again."
            )
    return LocalFile(source, str(path), digest)
