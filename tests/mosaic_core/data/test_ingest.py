import pytest
from builders import article, pubmed_xml, write_xml
from pydantic import ValidationError

from mosaic_core.config import PairConfig
from mosaic_core.data.pairs import DropReason, FileStats, build_query, clean_title, iter_rows

LONG_EN = ("Patients with chronic kidney disease were followed for five years and the incidence of "
           "cardiovascular events was compared between those who received the new treatment and "
           "those who received standard care, with adjustment for age and sex.")
LONG_IT = ("I pazienti con malattia renale cronica sono stati seguiti per cinque anni e l'incidenza "
           "degli eventi cardiovascolari è stata confrontata tra coloro che hanno ricevuto il nuovo "
           "trattamento e coloro che hanno ricevuto le cure standard, con aggiustamento per età e sesso.")


def rows_of(tmp_path, citations, cfg=None, **kw):
    cfg = cfg or PairConfig()
    stats = FileStats()
    path = write_xml(tmp_path / "f.xml", pubmed_xml(citations, **kw))
    rows = [r for batch in iter_rows(path, cfg, stats, batch_rows=2) for r in batch]
    return rows, stats


def test_clean_title():
    assert clean_title("[Vaccines are drugs].", True) == ("Vaccines are drugs.", True)
    assert clean_title("[Vaccines are drugs].", False) == ("[Vaccines are drugs].", True)
    assert clean_title("Effect of [3H]thymidine on cells.", True) == ("Effect of [3H]thymidine on cells.", False)


def test_build_query_appends_metadata_as_configured():
    cfg = PairConfig()
    assert build_query("T.", "J", ["a", "b"], cfg) == "T. J a, b"
    assert build_query("T.", "J", ["a"], PairConfig(append_journal=False, append_keywords=False)) == "T."


def test_every_drop_counted_by_reason(tmp_path):
    cits = [
        article(1, abstract=LONG_EN, title="Kidney disease outcomes in a cohort", keywords=("ckd",)),
        article(2, abstract=None),
        article(3, title="", abstract=LONG_EN),
        article(4, title="Too short", abstract=LONG_EN),
        article(5, abstract="Only a few words here."),
        article(6, title="Esiti della malattia renale in una coorte", abstract=LONG_IT, language="ita"),
        article("x"),
    ]
    rows, stats = rows_of(tmp_path, cits)
    by_pmid = {r["pmid"]: r for r in rows}
    assert by_pmid[1]["drop_reason"] is None
    assert by_pmid[1]["query"] == "Kidney disease outcomes in a cohort Journal of Tests ckd"
    assert by_pmid[1]["document"] == LONG_EN and by_pmid[1]["detected_language"] == "en"
    assert by_pmid[2]["drop_reason"] == DropReason.NO_ABSTRACT.value
    assert by_pmid[3]["drop_reason"] == DropReason.NO_TITLE.value
    assert by_pmid[4]["drop_reason"] == DropReason.SHORT_TITLE.value
    assert by_pmid[5]["drop_reason"] == DropReason.SHORT_ABSTRACT.value
    assert by_pmid[6]["drop_reason"] == DropReason.LANGUAGE.value and by_pmid[6]["detected_language"] == "it"
    assert stats.records == 7 and stats.kept == 1
    assert sum(stats.as_counts().values()) + stats.kept == stats.records
    assert stats.as_counts()[DropReason.MALFORMED.value] == 1
    assert "'x'" in stats.malformed_examples[0]
    assert len(rows) == 6


def test_bracketed_translation_decided_on_training_text(tmp_path):
    """Non-English article, English bracketed title: kept iff the abstract is English."""
    cits = [
        article(1, title="[Kidney disease outcomes in an Italian cohort].", abstract=LONG_EN,
                language="ita", vernacular="Esiti"),
        article(2, title="[Kidney disease outcomes in an Italian cohort].", abstract=LONG_IT,
                language="ita", vernacular="Esiti"),
    ]
    rows, _ = rows_of(tmp_path, cits)
    assert rows[0]["drop_reason"] is None and rows[0]["title_translated"]
    assert rows[0]["query"].startswith("Kidney disease outcomes in an Italian cohort.")
    assert rows[1]["drop_reason"] == "language"


def test_keep_languages_config(tmp_path):
    cits = [article(6, title="Esiti della malattia renale in una coorte", abstract=LONG_IT)]
    rows, _ = rows_of(tmp_path, cits, PairConfig(keep_languages=("en", "it")))
    assert rows[0]["drop_reason"] is None


def test_truncated_file_stops_stream_and_records_error(tmp_path):
    path = write_xml(tmp_path / "f.xml", pubmed_xml([article(i, abstract=LONG_EN) for i in range(1, 6)]))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 3 // 4])
    stats = FileStats()
    rows = [r for b in iter_rows(path, PairConfig(), stats) for r in b]
    assert stats.error and "truncated or corrupt" in stats.error
    assert len(rows) == stats.records >= 3


def test_config_is_frozen_and_validated():
    with pytest.raises(ValidationError):
        PairConfig(min_title_words=-1)
    with pytest.raises(ValidationError):
        PairConfig(unknown_field=1)
    cfg = PairConfig()
    with pytest.raises(ValidationError):
        cfg.min_title_words = 3
    assert PairConfig().config_hash() == PairConfig().config_hash() != PairConfig(min_title_words=2).config_hash()
