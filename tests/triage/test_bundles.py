"""Repro bundles offered by the plugin: only for failures they reproduce, and runnable by a
fresh ``python -I`` with torch alone, also for a Hugging Face model whose outputs are
library types."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.compiles


def test_wrong_expectation_gets_no_bundle(run_aoti, tmp_path: Path) -> None:
    # the program mutates x; the test says it mutates nothing: a bundle replaying eager
    # against the engine could not reproduce that, so none is offered
    bundles = tmp_path / "failed"
    result = run_aoti(
        """
        def test_declared(aoti):
            aoti.check(DoubleThenCos(), (example(),), mutates={})
        """,
        f"--aoti-keep-failed={bundles}",
    )
    result.assert_outcomes(failed=1)
    assert "repro bundle" not in result.stdout.str()
    assert not bundles.exists() or not any(bundles.iterdir())


BERT_TEST = """
import pytest
import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

transformers = pytest.importorskip("transformers")


class FirstMulBecomesAdd(CustomGraphPass):
    # a compiler fault in the engine only: the first aten.mul becomes an add
    def __call__(self, graph):
        for node in graph.nodes:
            if node.op == "call_function" and node.target is torch.ops.aten.mul.Tensor:
                node.target = torch.ops.aten.add.Tensor
                return

    def uuid(self):
        return "first-mul-becomes-add"


def test_bert(aoti):
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=64,
    )
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 99, (2, 8))
    aoti.check(
        model,
        (ids,),
        {"attention_mask": torch.ones(2, 8, dtype=torch.long)},
        inductor_configs={"post_grad_custom_post_pass": FirstMulBecomesAdd()},
    )
"""


def test_bert_bundle_reproduces_in_a_fresh_isolated_python(
    pytester: pytest.Pytester, shared_cache_dir: Path, tmp_path: Path, run_isolated: Any
) -> None:
    pytest.importorskip("transformers")
    bundles = tmp_path / "failed"
    pytester.makepyfile(test_bert=BERT_TEST)
    result = pytester.runpytest(
        "--aoti-device=cpu",
        f"--aoti-cache-dir={shared_cache_dir}",
        f"--aoti-keep-failed={bundles}",
        "--aoti-localize=off",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E *repro bundle: *test_bert*exits 1 while it reproduces*"])
    [folder] = list(bundles.iterdir())
    script = folder / "repro.py"

    run = run_isolated(script, tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "REPRODUCED: the AOTI engine differs from eager" in run.stdout
    assert "Traceback" not in run.stdout + run.stderr

    (folder / "package.pt2").unlink()
    run = run_isolated(script, tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "COULD NOT RUN" in run.stderr
