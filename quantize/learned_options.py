"""Settings of the learned-rotation optimizer (`radiance quantize --rotation learned`).

Recorded in radiance-quantize.json beside the quantizer options (except `resume`, which does not
change the result). The learning rates, AdamW's betas / weight decay and the cosine decay to
1/20 of each rate follow ParoQuant's published recipe; the calibration size and epochs default
to a configuration a GPU runs in minutes on a 0.5B model (docs/quantize.md gives CPU sizes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


class LearnedOptionsError(ValueError):
    pass


@dataclass
class LearnedOptions:
    calib: str | None = None  # a UTF-8 text file; None = the shipped calibration corpus
    samples: int = 128
    seq_len: int = 512
    epochs: int = 10  # per stage
    batch: int = 4  # windows per optimizer step
    lr_rotation: float = 0.05  # stage 1: angles and channel scales
    # stage 2: 5x ParoQuant's rates, since these defaults make 4-10x fewer optimizer steps per stage
    lr_weight: float = 5e-5  # stage 2: the rotated weight
    lr_quantizer: float = 5e-6  # stage 2: per-group scales and zeros
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    resume: bool = field(default=False, compare=False)

    def check(self) -> None:
        for flag, value, low in (("--samples", self.samples, 1), ("--seq-len", self.seq_len, 8),
                                 ("--epochs", self.epochs, 0), ("batch", self.batch, 1)):
            if value < low:
                raise LearnedOptionsError(f"{flag} {value}: must be at least {low}")
        if self.samples % self.batch:
            raise LearnedOptionsError(f"--samples {self.samples}: must be a multiple of the batch of {self.batch} windows")

    def record(self, device: str) -> dict:
        rec = {**asdict(self), "betas": list(self.betas), "device": device}
        del rec["resume"]
        return rec
