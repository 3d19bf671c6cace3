"""Which call format a model family was trained on, told from its chat template, and the names `prompt_format` takes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from sanctum_proxy.codecs.registry import FALLBACK, FORMAT_NAMES, FORMATS, format_of, render_call

if TYPE_CHECKING:
    PromptFormat = str
else:  # "auto" (`detect`, else Hermes) or a format name
    PromptFormat = Literal[("auto", *FORMAT_NAMES)]

__all__ = ["FALLBACK", "FORMAT_NAMES", "PromptFormat", "as_asked", "codec_of", "detect", "opens_bare", "render_call",
           "render_result"]

_BY_TEMPLATE = sorted((f for f in FORMATS.values() if f.detect is not None), key=lambda f: f.detect_rank)
_OLLAMA_FAMILIES = {family: f.name for f in FORMATS.values() for family in f.families}


def codec_of(fmt: str) -> str:
    """The codec (`Candidate.source`) that reads calls written in prompt format `fmt`."""
    return FORMATS[fmt].codec if fmt in FORMATS else fmt


def as_asked(fmt: str) -> tuple[str, frozenset[str]]:
    """The codec reading format (or codec) `fmt`, and the mends its calls need by design."""
    own = FORMATS.get(fmt)
    return (own.codec, own.as_asked) if own is not None else (fmt, frozenset())


def detect(template: Any, family: Any = None) -> str | None:
    """The format the chat template writes, else Ollama's `details.family`'s, else None."""
    text = template if isinstance(template, str) else ""
    for fmt in _BY_TEMPLATE:
        if fmt.detect is not None and fmt.detect(text):
            return fmt.name
    return _OLLAMA_FAMILIES.get(family.lower()) if isinstance(family, str) else None


def opens_bare(fmt: str) -> bool:
    """Whether answers open bare (`NAME\n{...}`), the prompt holding the first call marker."""
    return fmt in FORMATS and FORMATS[fmt].opens_bare


def render_result(fmt: str, name: str, call_id: str, text: str) -> str:
    return format_of(fmt).render_result(name, call_id, text)
