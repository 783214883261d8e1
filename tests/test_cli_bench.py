import json

from planner.cli import main


def test_list_models_json(capsys):
    assert main(["bench", "--list", "--json"]) == 0
    models = {m["model"]: m for m in json.loads(capsys.readouterr().out)}
    assert {"resnet50", "bert-large", "gpt-1b", "gpt-7b", "diffusion-sd15"} <= set(models)
    assert models["gpt-7b"]["unit"] == "tokens" and "H100" in models["gpt-7b"]["gpus"]


def test_model_figures_carry_sources(capsys):
    assert main(["bench", "--model", "gpt-7b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    h100 = next(g for g in out["gpus"] if g["gpu"] == "H100")
    assert h100["per_gpu_per_second"] == 10643 and not h100["estimated"] and "llm-foundry" in h100["source"]
    assert all(g["source"] for g in out["gpus"])


def test_unknown_model_exits_2(capsys):
    assert main(["bench", "--model", "resnet-50"]) == 2
    assert "did you mean 'resnet50'" in capsys.readouterr().err
