"""A tiny real Qwen2 checkpoint with a real tokenizer, for the learned-rotation tests (seconds).

transformers' Qwen2 with random weights (hidden 256, intermediate 512: two 128-groups and four,
so every linear is quantizable) saved in bf16 like a real source -- with a few input channels of
every linear 8x larger, the outliers of trained LLMs that channel scales and rotations exist to
tame, so there is something to learn -- and a byte-level BPE of 512
tokens trained on the shipped calibration corpus, so `--calib` and the shipped text both tokenize
as they would for a real model."""

from __future__ import annotations

from pathlib import Path


def write_tiny_qwen(path: Path, layers: int = 2, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    from radiance.quantize.calibration import shipped_texts

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(shipped_texts().values()), trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(path)
    cfg = Qwen2Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for name, mod in model.model.layers.named_modules():
            if isinstance(mod, torch.nn.Linear):
                mod.weight[:, torch.randperm(mod.in_features)[:4]] *= 8
    model.to(torch.bfloat16).save_pretrained(path)
    return path
