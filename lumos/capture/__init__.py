"""Record PyTorch profiler traces that Lumos can replay (optional extra `capture`).

`lumos.capture.profile` profiles a few steady-state iterations of any training
loop with the profiler settings Lumos needs and writes one `rank{R}.json.gz`
per rank; `lumos.capture.gpt` is a small self-contained GPT training script
used to record reference traces (`lumos capture gpt ...`).

torch is imported only inside the functions that need it, so this package and
`lumos capture` (`lumos.commands.capture`) import without torch; using them without torch raises
`CaptureUnavailable` with the install hint. See docs/capture.md.
"""

from __future__ import annotations

INSTALL_HINT = "lumos capture needs torch: pip install 'lumos[capture]'"


class CaptureUnavailable(ImportError):
    """torch is not installed; the message says how to install it."""


def require_torch():
    """Import and return torch, or raise CaptureUnavailable with the install hint."""
    try:
        import torch
    except ImportError as exc:  # ModuleNotFoundError, or a broken install
        raise CaptureUnavailable(INSTALL_HINT) from exc
    return torch


def __getattr__(name: str):
    # Lazy re-exports: `from lumos.capture import profile_steps` without
    # importing torch until the helper is called.
    if name in ("profile_steps", "lumos_profile", "trace_path_for_rank"):
        from . import profile as _profile

        return getattr(_profile, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["INSTALL_HINT", "CaptureUnavailable", "require_torch",
           "profile_steps", "lumos_profile", "trace_path_for_rank"]
