import pytest
from builders import stage1_config, tiny_bert
from huggingface_hub import ModelCard

from mosaic_core.config import StageConfig
from mosaic_core.modeling.card import facts, render
from mosaic_core.modeling.modeldir import MODEL_CARD
from mosaic_core.trainer import Hooks, train_stage
from mosaic_core.vocab.build import build_expanded_model

TOPICS = ["cardiomyopathy", "immunotherapy", "hepatocytes", "nephropathy"]
PAIRS = [(f"{t} in the patient {i}", f"the patient with {t} was treated; {t} and cells {i}") for i in range(4)
         for t in TOPICS]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("card")
    base = tiny_bert(root / "base")
    build_expanded_model([t for p in PAIRS for t in p] * 3, root / "stage1", stage1_config(base, vocab_size=300))
    train_stage(str(root / "stage1"), PAIRS, StageConfig(name="joint", kind="joint", batch_size=8, max_steps=2,
                                                         precision="fp32", hard_negatives=0),
                root / "joint", hooks=Hooks(progress=False))
    return base, root


def test_every_model_written_carries_its_own_card_not_the_bases(trained):
    base, root = trained
    for model in ("stage1", "joint"):
        card = ModelCard.load(root / model / MODEL_CARD)
        assert card.data.base_model == str(base) and "mosaic" in card.data.tags
        assert card.data.library_name == "sentence-transformers"
        assert "domain tokens were added" in card.text and 'SentenceTransformer("' in card.text
    assert "| joint | joint | 2 |" in ModelCard.load(root / "joint" / MODEL_CARD).text


def test_scores_in_the_card_are_the_evaluation_numbers(trained):
    _, root = trained
    scores = {"heldout": {"metric": "ndcg_at_10", "value": 0.8123456, "base": 0.80},
              "BIOSSES": {"metric": "cosine_spearman", "value": 0.7, "base": 0.75}}
    card = ModelCard(render(facts(str(root / "joint"), "biomedicine", scores)))
    (result_heldout, result_sts) = card.data.to_dict()["model-index"][0]["results"]
    assert result_heldout["metrics"] == [{"type": "ndcg_at_10", "value": 0.812346}]
    assert result_sts["task"]["type"] == "sts" and result_sts["metrics"][0]["value"] == 0.7
    assert "| heldout | ndcg_at_10 | 81.23 | 80.00 | +1.23 |" in card.text
    assert "| BIOSSES | cosine_spearman | 70.00 | 75.00 | -5.00 |" in card.text
    assert "biomedicine" in card.data.tags
