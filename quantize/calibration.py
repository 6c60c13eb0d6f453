"""Calibration text for `radiance quantize --rotation learned`: token windows, seeded.

The shipped corpus (quantize/corpus/calibration/: essays, Python, build/ops docs with shell, YAML,
JSON, C and SQL, question-and-answer dialogue, all written for this project) is separate from
the evaluation corpus (`radiance eval kl` reads quantize/corpus/*.txt), so a learned checkpoint is
never scored on the text it was fitted to. `--calib FILE` replaces it with a user's UTF-8 text.

The documents are tokenized, joined with the tokenizer's EOS and split 7/8 : 1/8 into a training
and a validation stream; `samples` windows of `seq_len` tokens start at seeded random offsets
of the training stream (windows overlap when the text is shorter than samples x seq_len), and
max(1, samples // 8) windows of the validation stream pick the best epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch

VAL_FRACTION = 8  # 1/8 of the token stream is held out for choosing the best epoch


class CalibrationError(ValueError):
    pass


@dataclass
class CalibrationSet:
    train: torch.Tensor  # [samples, seq_len] int64
    val: torch.Tensor  # [val_samples, seq_len] int64
    source: str  # "shipped" or the --calib path
    tokens: int  # tokens in the whole text


def shipped_texts() -> dict[str, str]:
    root = resources.files("radiance.quantize") / "corpus" / "calibration"
    return {p.name: p.read_text() for p in sorted(root.iterdir(), key=lambda p: p.name) if p.name.endswith(".txt")}


def read_user_text(path: Path) -> dict[str, str]:
    path = Path(path)
    if not path.is_file():
        raise CalibrationError(f"--calib {path}: no such file; give a UTF-8 text file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CalibrationError(f"--calib {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not text.strip():
        raise CalibrationError(f"--calib {path}: the file is empty")
    return {path.name: text}


def calibration_set(tokenizer, calib: Path | None, samples: int, seq_len: int, seed: int) -> CalibrationSet:
    texts = read_user_text(calib) if calib is not None else shipped_texts()
    source = str(calib) if calib is not None else "shipped"
    eos = tokenizer.eos_token_id
    stream: list[int] = []
    for text in texts.values():
        stream += tokenizer(text).input_ids + ([eos] if eos is not None else [])
    ids = torch.tensor(stream, dtype=torch.int64)
    cut = len(ids) - len(ids) // VAL_FRACTION
    train_ids, val_ids = ids[:cut], ids[cut:]
    shortest = min(len(train_ids), len(val_ids))
    if shortest < seq_len:
        need = seq_len * VAL_FRACTION
        raise CalibrationError(
            f"calibration text ({source}) has {len(ids)} tokens: too short for --seq-len {seq_len} "
            f"(needs at least {need} tokens, 1/{VAL_FRACTION} of them held out); lower --seq-len or give a longer --calib file"
        )
    gen = torch.Generator().manual_seed(seed)
    return CalibrationSet(
        train=_windows(train_ids, samples, seq_len, gen),
        val=_windows(val_ids, max(1, samples // VAL_FRACTION), seq_len, gen),
        source=source, tokens=len(ids),
    )


def _windows(ids: torch.Tensor, count: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, len(ids) - seq_len + 1, (count,), generator=gen)
    return torch.stack([ids[s : s + seq_len] for s in starts.tolist()])
