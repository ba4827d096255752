import json

from builders import shared_data

from mosaic_core.data.langid import detect_language, langdetect_full, looks_english

EN = ("We measured the concentration of the drug in plasma and found that it was higher in "
      "patients with renal failure than in those with normal function, which suggests that "
      "the dose should be reduced.")
IT = ("Abbiamo misurato la concentrazione del farmaco nel plasma e abbiamo osservato che era più "
      "alta nei pazienti con insufficienza renale rispetto a quelli con funzione normale.")
DE = ("Wir haben die Konzentration des Medikaments im Plasma gemessen und festgestellt, dass sie "
      "bei Patienten mit Niereninsuffizienz höher war als bei Patienten mit normaler Funktion.")


def test_languages_detected():
    assert detect_language(EN) == "en"
    assert detect_language(IT) == "it"
    assert detect_language(DE) == "de"
    assert detect_language("12345 %% !!") == "unk"


def test_fast_path_is_precise_on_other_languages():
    assert looks_english(EN)
    assert not looks_english(IT) and not looks_english(DE)


def test_deterministic():
    text = "Tuberculosis in cattle"  # short, ambiguous: the random walk decides
    assert len({langdetect_full(text, seed=0) for _ in range(5)}) == 1
    assert len({detect_language(text) for _ in range(5)}) == 1


def test_agrees_with_full_text_langdetect_on_real_records():
    path = shared_data("biomed", "biomed_title_abstract.jsonl")
    texts = []
    with open(path) as fh:
        for line in fh:
            rec = json.loads(line)
            texts.append(f"{rec['title'] or ''} {rec['abstract'] or ''}".strip())
            if len(texts) == 400:
                break
    disagree = [t for t in texts if detect_language(t) != langdetect_full(t)]
    assert len(disagree) <= 0.005 * len(texts), disagree[:3]
