"""Build tiny random model folders to try the examples offline (no download).

    python examples/make_tiny_models.py DIR
    # DIR/tiny-llama    a 2-layer LlamaForCausalLM with a word-level tokenizer
    # DIR/tiny-encoder  a 1-layer BERT in the sentence-transformers layout (modules.json, 1_Pooling/)

The weights are random, so the generated text is gibberish; the folders have the
same files as real ones (config.json, model.safetensors, tokenizer files), which is
what the examples read. The test suite (tests/test_examples.py) uses them too.
"""
from __future__ import annotations

import argparse
import json
import os

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "to", "house", "big", "small", "red", "blue",
         "is", "was", "and", "it", "of", "in", "quantized", "model", "int8", "weights", "fast", "slow"]


def _word_level_tokenizer(specials: list[str]):
    """A tokenizers WordLevel model over WORDS (whitespace split), wrapped as a transformers fast tokenizer."""
    import tokenizers
    from tokenizers import models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(specials + WORDS)}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok, vocab


def tiny_llama(path: str, seed: int = 0) -> str:
    """A random 2-layer Llama (hidden 64, 4 heads / 2 KV heads) and its tokenizer, saved in ``path``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok, vocab = _word_level_tokenizer(["[UNK]", "<s>", "</s>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>",
                                        eos_token="</s>", pad_token="</s>",
                                        model_input_names=["input_ids", "attention_mask"])
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"], pad_token_id=vocab["</s>"])
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def tiny_encoder(path: str, seed: int = 0) -> str:
    """A random 1-layer BERT (hidden 64) in the sentence-transformers layout, saved in ``path``."""
    import torch
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok, vocab = _word_level_tokenizer(specials)
    from tokenizers import processors

    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=64, pad_token_id=vocab["[PAD]"])
    BertModel(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    with open(os.path.join(path, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}], f)
    os.makedirs(os.path.join(path, "1_Pooling"), exist_ok=True)
    with open(os.path.join(path, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 64, "pooling_mode_mean_tokens": True}, f)
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="where to write tiny-llama/ and tiny-encoder/")
    args = parser.parse_args(argv)
    print("wrote", tiny_llama(os.path.join(args.dir, "tiny-llama")))
    print("wrote", tiny_encoder(os.path.join(args.dir, "tiny-encoder")))


if __name__ == "__main__":
    main()
