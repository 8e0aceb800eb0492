#!/usr/bin/env python3
"""Fixtures and a full-size check for our T5 text encoder (core/models/t5_encoder.*) and
SentencePiece tokenizer (core/text/sentencepiece_tokenizer.*), against Hugging Face
`transformers` (T5EncoderModel, T5Tokenizer) and the Python `sentencepiece` package, used as
libraries (no model code is copied here).

Needs torch, transformers (4.57 tested), sentencepiece (0.2.3 tested), safetensors, protobuf:
    PYTHONPATH=/work/pydeps /opt/venv/bin/python tools/parity/t5_parity.py --make-fixture \
        tests/fixtures/t5_tiny

--make-fixture DIR   writes the committed test fixture (read by tests/t5_encoder_test.cpp and
                     tests/sentencepiece_tokenizer_test.cpp):
  spiece.model            a tiny unigram SentencePiece model (T5 ids: pad 0, eos 1, unk 2, no
                          bos; nmt_nfkc normalisation like T5's) trained on emoji names + English
  not_t5.model            a SentencePiece model with the library's default ids (not T5's)
  prompts.json            >= 200 prompts with the ids of sentencepiece (plain encode) and of
                          HF T5Tokenizer (slow, legacy=True, max_length 512, truncation, EOS)
  model/                  a random tiny T5ForConditionalGeneration (gated-gelu; has decoder.*
                          tensors the encoder loader must skip), save_pretrained(safetensors)
  model_sharded/          the same encoder saved as T5EncoderModel in several shards (index)
  model_relu/             a random tiny T5 v1.0-style encoder (feed_forward_proj "relu"), stored
                          in bf16 (loaded as fp32) as pytorch_model.bin
  expected.safetensors    input ids / masks and last_hidden_state of HF for fp32, bf16 and fp16
                          (fp16 as from_pretrained(torch_dtype=float16) loads it: `wo` stays
                          fp32, as Infinity runs flan-t5), plus Infinity's compact form

--check DIR          a flan-t5-xl-shaped check (d_model 2048, 24 layers, 32 heads, d_kv 64,
                     d_ff 5120, vocab 32128): DIR/config.json and DIR/expected.safetensors (13
                     MB, 25 with --fp16: ids padded to 512 like Infinity, masks, HF's fp32 output, with --fp16
                     also HF's fp16 one as Infinity runs it). The weights are not written: both
                     sides regenerate them from a seed (check_weights below), so DIR fits the
                     GPU machine's 64 MiB carry. Make DIR here (HF is not on the GPU machine;
                     fp32 on 2 CPU cores takes minutes), then
                         VARSCOPE_T5_PARITY_DIR=DIR build/tests/varscope_tests \
                             --gtest_filter='T5EncoderParity.*'          (CPU, fp32)
                         VARSCOPE_T5_PARITY_DIR=DIR build/tests/gpu/varscope_gpu_tests \
                             --gtest_filter='T5EncoderGpu.*'             (CUDA, fp32 + fp16)
                     --layers N makes a quick smaller check; --save-model also writes the HF
                     folder DIR/model (5 GB) for a run through the folder loader.
"""
import argparse
import json
import math
import os
import random
import sys

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
EMOJI_JSON = "/work/shared/datasets/emoji64/emoji.json"

ENGLISH = """a photo of a cat sitting on a red chair in the morning light
an oil painting of a lighthouse on a rocky coast during a storm
a watercolor illustration of a fox in a snowy forest
a close up portrait of an old man with a white beard, dramatic lighting
a futuristic city skyline at night with flying cars and neon signs
a bowl of fresh fruit on a wooden table, still life, soft shadows
two dogs playing with a ball in a green park on a sunny day
a cozy living room with a fireplace, bookshelves and a sleeping cat
a mountain lake reflecting pine trees and snow capped peaks at sunrise
a cup of coffee with latte art next to an open notebook
the quick brown fox jumps over the lazy dog
a small boat floating on a calm blue sea under a clear sky
a child drawing flowers with colorful crayons on white paper
an astronaut riding a horse on the surface of the moon, digital art
a medieval castle on a hill surrounded by fog, highly detailed
a bright yellow sunflower field under a blue sky with white clouds
a robot cooking pancakes in a modern kitchen, cartoon style
a black and white photograph of a busy street in the rain
a plate of sushi with chopsticks on a dark slate board
a hot air balloon flying over green hills and small villages""".splitlines()

# Text outside the tiny model's vocabulary on purpose: unknown pieces must map to <unk> (id 2).
UNICODE = [
    "一只可爱的猫坐在窗台上", "東京タワーの夜景", "한국어 문장입니다", "café crème brûlée",
    "Ångström naïve façade résumé", "Straße und Größe", "ＦＵＬＬ－ＷＩＤＴＨ　ｔｅｘｔ　１２３",
    "e\u0301 combining accent", "ligature ﬁne ﬂower", "Привет, мир!", "مرحبا بالعالم",
    "שלום עולם", "Ελληνικά γράμματα", "emoji 😀😃😄 party 🎉🎊", "family 👨‍👩‍👧‍👦 zwj",
    "flag 🇫🇷 and 🇯🇵", "skin tone 👍🏽 thumbs", "keycap #️⃣ 1️⃣", "math ∑ ∫ √ ∞ ≠ ≤",
    "currency € £ ¥ ₹ $", "zero\u200bwidth\u200bspace", "non\u00a0breaking\u00a0space",
    "ideographic\u3000space", "soft\u00adhyphen", "tab\tseparated\tvalues",
    "line one\nline two\nline three", "carriage\r\nreturn", "mixed 中文 and English 😀",
    "ｈａｌｆ ﾊﾝｶｸ ｶﾀｶﾅ", "①②③ circled", "superscript x² y³", "roman Ⅻ numeral",
    "emoji only 🐱", "🐶🐱🐭🐹🐰🦊🐻🐼", "Ⓐⓑⓒ enclosed", "¡Hola! ¿Qué tal?",
    "naïve cooperation coöperate", "Tiếng Việt có dấu", "हिन्दी वाक्य", "ภาษาไทย",
]

WHITESPACE = [
    "", " ", "   ", "\t", "\n", " \n\t ", "a    b", "  leading spaces", "trailing spaces   ",
    "double  space  between  words", "a\t\tb", "new\n\nlines", "\u3000", "word",
    " single leading", "x", ".", "!!!", "...", "a-b_c.d/e\\f", "12345 67890", "3.14159",
    "UPPER CASE PROMPT", "MiXeD cAsE pRoMpT", "quotes \"double\" and 'single'",
    "brackets (round) [square] {curly} <angle>",
]

# Strings that HF's tokenizer treats as its added tokens; a plain SentencePiece encode does not.
SPECIAL_TEXT = [
    "a cat </s> a dog", "<pad> padding text", "unknown <unk> token", "</s>",
    "<extra_id_0> sentinel", "text with <extra_id_99> inside", "<extra_id_5>",
]


def emoji_names():
    with open(EMOJI_JSON, encoding="utf-8") as f:
        data = json.load(f)
    names = []
    for e in data:
        if e.get("name"):
            names.append(e["name"].lower())
        names.extend(s.replace("_", " ") for s in e.get("short_names") or [])
    return data, names


def corpus(names):
    lines = list(ENGLISH) + names
    rnd = random.Random(0)
    templates = ["a photo of a {}", "an emoji of a {}", "{} on a white background",
                 "a cartoon {} with a smile", "the {} and the {}", "a painting of {} at night"]
    for _ in range(3000):
        t = rnd.choice(templates)
        lines.append(t.format(*(rnd.choice(names) for _ in range(t.count("{}")))))
    # A few accented / Latin-1 words so they are in the vocabulary (others stay unknown).
    lines += ["café", "naïve", "résumé", "crème brûlée", "façade"] * 5
    return lines


def train_spiece(lines, path, vocab_size):
    import io

    import sentencepiece as spm
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
        model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
        character_coverage=0.9995, normalization_rule_name="nmt_nfkc", num_threads=1,
        input_sentence_size=0, shuffle_input_sentence=False, minloglevel=2)
    with open(path, "wb") as f:
        f.write(model.getvalue())


def make_prompts(data, names):
    rnd = random.Random(1)
    prompts = [(p, "ordinary") for p in ENGLISH]
    for n in rnd.sample(names, 100):
        prompts.append((rnd.choice(["a {}", "an emoji of a {}, flat style", "{}",
                                    "a photo of a {} on the beach"]).format(n), "ordinary"))
    for e in rnd.sample(data, 20):  # the emoji characters themselves
        try:
            ch = "".join(chr(int(c, 16)) for c in e["unified"].split("-"))
        except ValueError:
            continue
        prompts.append((f"{ch} {e['name'].lower()}", "unicode"))
    prompts += [(p, "unicode") for p in UNICODE]
    prompts += [(p, "whitespace") for p in WHITESPACE]
    long_base = " ".join(ENGLISH)
    prompts.append(((long_base + " ") * 3, "long"))  # ~ 400-700 tokens
    prompts.append(((long_base + " ") * 8, "long"))  # > 512 tokens for sure
    prompts.append(("cat " * 600, "long"))
    prompts.append(("a" * 3000, "long"))
    prompts.append(("😀" * 700, "long"))  # unknown pieces, > 512
    prompts += [(p, "special") for p in SPECIAL_TEXT]
    return prompts


def tokenizer_expectations(spiece_path, prompts, max_length=512):
    import sentencepiece as spm
    from transformers import T5Tokenizer
    sp = spm.SentencePieceProcessor(model_file=spiece_path)
    hf = T5Tokenizer(vocab_file=spiece_path, legacy=True, model_max_length=max_length)
    fast = None
    try:
        from transformers import T5TokenizerFast
        fast = T5TokenizerFast.from_pretrained(os.path.dirname(spiece_path), legacy=True,
                                               from_slow=True)
    except Exception as e:  # the fast conversion needs protobuf; it is informative only
        print(f"note: no T5TokenizerFast ({e})", file=sys.stderr)
    out = []
    for text, kind in prompts:
        enc = hf([text], max_length=max_length, truncation=True, padding=False)
        item = {"text": text, "kind": kind, "sp_ids": sp.encode(text),
                "hf_ids": enc["input_ids"][0]}
        if fast is not None:
            item["hf_fast_ids"] = fast([text], max_length=max_length, truncation=True)["input_ids"][0]
        out.append(item)
    return out


def tiny_config(vocab, relu=False):
    # Tied embeddings (one table on disk) keep the committed fixture small; the encoder does
    # not use the LM head either way.
    from transformers import T5Config
    return T5Config(vocab_size=vocab, d_model=32, d_kv=8, d_ff=64, num_layers=1 if relu else 2,
                    num_decoder_layers=1, num_heads=4, relative_attention_num_buckets=8,
                    relative_attention_max_distance=20, dropout_rate=0.0,
                    layer_norm_epsilon=1e-6,
                    feed_forward_proj="relu" if relu else "gated-gelu",
                    tie_word_embeddings=True, decoder_start_token_id=0, eos_token_id=1,
                    pad_token_id=0)


def randomize(model, seed):
    # HF's init gives tiny weights; wider ones make the test sensitive to every term.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "relative_attention_bias" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)


def hf_outputs(folder, ids, mask, device="cpu"):
    """last_hidden_state of T5EncoderModel loaded from `folder` for fp32 / bf16 / fp16."""
    from transformers import T5EncoderModel
    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16),
                        ("fp16", torch.float16)):
        m = T5EncoderModel.from_pretrained(folder, dtype=dtype).to(device).eval()
        if name == "fp16":
            assert m.encoder.block[0].layer[1].DenseReluDense.wo.weight.dtype == torch.float32
        with torch.no_grad():
            h = m(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        out[name] = h.float().cpu()
        del m
    return out


def infinity_compact(hidden, mask):
    """The compact form Infinity's encode_prompt builds: valid rows of every prompt back to
    back, their lengths, and cumulative offsets with a leading 0 (int32)."""
    lens = mask.sum(dim=-1)
    rows = [h[: int(n)] for h, n in zip(hidden.unbind(0), lens.tolist())]
    cu = torch.nn.functional.pad(lens.to(torch.int32).cumsum(0), (1, 0)).to(torch.int32)
    return torch.cat(rows, 0), lens.to(torch.int64), cu


def make_fixture(out_dir):
    from transformers import T5EncoderModel, T5ForConditionalGeneration, T5Tokenizer
    os.makedirs(out_dir, exist_ok=True)
    data, names = emoji_names()
    spiece = os.path.join(out_dir, "spiece.model")
    train_spiece(corpus(names), spiece, vocab_size=400)

    # A model with SentencePiece's default ids (unk 0, bos 1, eos 2): the loader must refuse it.
    import io

    import sentencepiece as spm
    other = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(ENGLISH * 5), model_writer=other,
                                   vocab_size=60, normalization_rule_name="identity",
                                   num_threads=1, minloglevel=2)
    with open(os.path.join(out_dir, "not_t5.model"), "wb") as f:
        f.write(other.getvalue())

    prompts = make_prompts(data, names)
    items = tokenizer_expectations(spiece, prompts)
    with open(os.path.join(out_dir, "prompts.json"), "w", encoding="utf-8") as f:
        json.dump({"spiece": "spiece.model", "max_length": 512, "prompts": items}, f,
                  ensure_ascii=False, separators=(",", ":"))
    n_long = sum(len(i["sp_ids"]) + 1 > 512 for i in items)
    n_diff = sum(i["sp_ids"][:511] + [1] != i["hf_ids"] for i in items)
    print(f"{len(items)} prompts, {n_long} truncated, {n_diff} where HF != sentencepiece+EOS")

    vocab = spm.SentencePieceProcessor(model_file=spiece).get_piece_size() + 12  # padded, like flan
    torch.manual_seed(0)
    full = T5ForConditionalGeneration(tiny_config(vocab)).eval()
    randomize(full, 1)
    full.save_pretrained(os.path.join(out_dir, "model"), safe_serialization=True)
    enc = T5EncoderModel(tiny_config(vocab)).eval()
    enc.load_state_dict({k: v for k, v in full.state_dict().items()
                         if not k.startswith(("decoder.", "lm_head."))}, strict=False)
    enc.save_pretrained(os.path.join(out_dir, "model_sharded"), safe_serialization=True,
                        max_shard_size="40KB")
    relu = T5EncoderModel(tiny_config(vocab, relu=True)).eval()
    randomize(relu, 2)
    relu = relu.to(torch.bfloat16)  # a bf16 checkpoint: the loader converts it to fp32
    # As pytorch_model.bin (torch.save zip), the folder layout older HF repos ship.
    relu.save_pretrained(os.path.join(out_dir, "model_relu"), safe_serialization=False)

    # A batch of three prompts of different lengths, padded to the longest (mask 0 on pads),
    # and the same prompts padded to a fixed 24 like Infinity pads to 512.
    tok = T5Tokenizer(vocab_file=spiece, legacy=True)
    texts = ["a cat", "an emoji of a smiling face with heart eyes on a white background",
             "😀 grinning face"]
    tensors = {}
    for tag, kw in (("longest", dict(padding="longest")),
                    ("max24", dict(padding="max_length", max_length=24))):
        b = tok(texts, truncation=True, return_tensors="pt", **kw)
        ids, mask = b["input_ids"], b["attention_mask"]
        tensors[f"{tag}.input_ids"] = ids.to(torch.int64)
        tensors[f"{tag}.attention_mask"] = mask.to(torch.int64)
        for name, h in hf_outputs(os.path.join(out_dir, "model"), ids, mask).items():
            tensors[f"{tag}.hidden.{name}"] = h
        compact, lens, cu = infinity_compact(tensors[f"{tag}.hidden.fp32"], mask)
        tensors[f"{tag}.kv_compact"], tensors[f"{tag}.lens"] = compact, lens
        tensors[f"{tag}.cu_seqlens"] = cu
    # No mask at all (HF treats it as all ones).
    ids1 = tensors["longest.input_ids"][1:2].clone()
    with torch.no_grad():
        tensors["nomask.input_ids"] = ids1
        tensors["nomask.hidden.fp32"] = T5EncoderModel.from_pretrained(
            os.path.join(out_dir, "model")).eval()(input_ids=ids1).last_hidden_state
        rm = T5EncoderModel.from_pretrained(os.path.join(out_dir, "model_relu"),
                                            dtype=torch.float32).eval()
        b = tok(texts, padding="longest", return_tensors="pt")
        tensors["relu.input_ids"] = b["input_ids"].to(torch.int64)
        tensors["relu.attention_mask"] = b["attention_mask"].to(torch.int64)
        tensors["relu.hidden.fp32"] = rm(**b).last_hidden_state
    # HF's bucket of every relative position in [-600, 600] for flan-t5's (32, 128) and the
    # fixture's (8, 20): the log-spaced buckets beyond what the tiny inputs reach.
    from transformers.models.t5.modeling_t5 import T5Attention
    rel = torch.arange(-600, 601, dtype=torch.int64)
    tensors["bucket.relative_position"] = rel
    for nb, md in ((32, 128), (8, 20)):
        tensors[f"bucket.{nb}_{md}"] = T5Attention._relative_position_bucket(
            rel, bidirectional=True, num_buckets=nb, max_distance=md).to(torch.int64)
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(out_dir, "expected.safetensors"),
              metadata={"texts": json.dumps(texts, ensure_ascii=False)})
    print("wrote", out_dir)


def check_weights(cfg, seed):
    """Weights the C++ side regenerates (tests/t5_check_weights.h) instead of shipping ~5 GB to
    the GPU machine: over the encoder's tensor names in sorted order (T5Encoder::state_dict()
    names), tensor k is randn(shape, generator=Generator().manual_seed(seed + k)), then
    layer norms 1 + 0.1 r, linear weights r / sqrt(fan_in), embedding and position bias r.
    Same torch (2.11) CPU generator and kernel on both sides, so the same numbers."""
    D, inner, F = cfg.d_model, cfg.num_heads * cfg.d_kv, cfg.d_ff
    shapes = {"embed_tokens.weight": (cfg.vocab_size, D), "final_layer_norm.weight": (D,)}
    for i in range(cfg.num_layers):
        b = f"block.{i}.layer."
        for n in "qkv":
            shapes[b + f"0.SelfAttention.{n}.weight"] = (inner, D)
        shapes[b + "0.SelfAttention.o.weight"] = (D, inner)
        if i == 0:
            shapes[b + "0.SelfAttention.relative_attention_bias.weight"] = (
                cfg.relative_attention_num_buckets, cfg.num_heads)
        shapes[b + "0.layer_norm.weight"] = (D,)
        shapes[b + "1.DenseReluDense.wi_0.weight"] = (F, D)
        shapes[b + "1.DenseReluDense.wi_1.weight"] = (F, D)
        shapes[b + "1.DenseReluDense.wo.weight"] = (D, F)
        shapes[b + "1.layer_norm.weight"] = (D,)
    out = {}
    for k, name in enumerate(sorted(shapes)):
        r = torch.randn(shapes[name], generator=torch.Generator().manual_seed(seed + k))
        if name.endswith("layer_norm.weight"):
            r = 0.1 * r + 1.0
        elif name.endswith(("q.weight", "k.weight", "v.weight", "o.weight", "wi_0.weight",
                            "wi_1.weight", "wo.weight")):
            r = r / math.sqrt(shapes[name][1])
        out[name] = r
    return out


def make_check(out_dir, device, layers=24, fp16=False, save_model=False, seed=1234):
    from transformers import T5Config, T5EncoderModel
    os.makedirs(out_dir, exist_ok=True)
    cfg = T5Config(vocab_size=32128, d_model=2048, d_kv=64, d_ff=5120, num_layers=layers,
                   num_heads=32, relative_attention_num_buckets=32,
                   relative_attention_max_distance=128, dropout_rate=0.0,
                   feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    cfg.save_pretrained(out_dir)  # DIR/config.json
    ours = check_weights(cfg, seed)
    hf = {("shared.weight" if k == "embed_tokens.weight" else "encoder." + k): v
          for k, v in ours.items()}
    hf["encoder.embed_tokens.weight"] = hf["shared.weight"]
    g = torch.Generator().manual_seed(4)
    lens = [512, 77, 5]  # one full row, a typical prompt, a short one
    ids = torch.zeros(len(lens), 512, dtype=torch.int64)
    mask = torch.zeros(len(lens), 512, dtype=torch.int64)
    for i, n in enumerate(lens):
        ids[i, : n - 1] = torch.randint(3, 32000, (n - 1,), generator=g)
        ids[i, n - 1] = 1
        mask[i, :n] = 1
    tensors = {"input_ids": ids, "attention_mask": mask}
    dtypes = [("fp32", torch.float32)] + ([("fp16", torch.float16)] if fp16 else [])
    for name, dtype in dtypes:
        m = T5EncoderModel(cfg).eval()
        # transformers 5 may leave the tied copy of the embedding out of the state dict.
        res = m.load_state_dict(hf, strict=False)
        bad = set(res.missing_keys) | set(res.unexpected_keys)
        assert bad <= {"encoder.embed_tokens.weight"}, bad
        assert torch.equal(m.encoder.embed_tokens.weight, hf["shared.weight"])
        if save_model and name == "fp32":
            m.save_pretrained(os.path.join(out_dir, "model"), safe_serialization=True,
                              max_shard_size="2GB")
        if dtype == torch.float16:  # as from_pretrained(torch_dtype=float16): `wo` stays fp32
            m = m.half()
            for i, blk in enumerate(m.encoder.block):
                wo = blk.layer[1].DenseReluDense.wo.float()
                wo.weight.data.copy_(hf[f"encoder.block.{i}.layer.1.DenseReluDense.wo.weight"])
        with torch.no_grad():
            h = m.to(device)(input_ids=ids.to(device), attention_mask=mask.to(device))
        tensors[f"hidden.{name}"] = h.last_hidden_state.float().cpu()
        del m
    save_file(tensors, os.path.join(out_dir, "expected.safetensors"),
              metadata={"seed": str(seed), "device": device})
    print("wrote", out_dir, "(%.1f MB) - now run: VARSCOPE_T5_PARITY_DIR=%s "
          "build/tests/varscope_tests --gtest_filter='T5EncoderParity.*' (CPU), or "
          "build/tests/gpu/varscope_gpu_tests --gtest_filter='T5EncoderGpu.*' (CUDA)" %
          (os.path.getsize(os.path.join(out_dir, "expected.safetensors")) / 1e6, out_dir))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make-fixture", metavar="DIR")
    ap.add_argument("--check", metavar="DIR")
    ap.add_argument("--cuda", action="store_true", help="compute --check's reference on CUDA")
    ap.add_argument("--layers", type=int, default=24,
                    help="--check with fewer layers (a quick smoke test of the procedure)")
    ap.add_argument("--fp16", action="store_true",
                    help="--check: also HF's fp16 output (slow on a CPU; use with --cuda)")
    ap.add_argument("--save-model", action="store_true",
                    help="--check: also write DIR/model, the HF folder (~5 GB fp32)")
    a = ap.parse_args()
    if a.make_fixture:
        make_fixture(a.make_fixture)
    elif a.check:
        make_check(a.check, "cuda" if a.cuda else "cpu", a.layers, a.fp16, a.save_model)
    else:
        ap.error("pass --make-fixture DIR or --check DIR")


if __name__ == "__main__":
    main()
