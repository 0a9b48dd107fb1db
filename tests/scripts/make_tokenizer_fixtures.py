#!/usr/bin/env python3
"""Regenerates tests/data/tokenizer/: reference token ids, decodes and chat renderings.

Run with the reference environment (Hugging Face tokenizers + transformers + jinja2 +
sentencepiece + gguf):

    /opt/refenv/bin/python tests/scripts/make_tokenizer_fixtures.py

References, tokenizer by tokenizer:

* SmolLM2-135M-Instruct (models/SmolLM2-135M-Instruct.Q4_1.gguf). No PyPI wheel ships the
  model's own tokenizer.json, so the reference is built by transformers from the GGUF
  (`AutoTokenizer.from_pretrained(models_dir, gguf_file=...)`), which takes the vocabulary,
  merges and special tokens from the file. transformers' GGUF converter ignores
  `tokenizer.ggml.pre` and installs a plain ByteLevel pre-tokenizer; the model's published
  tokenizer.json (and llama.cpp's "smollm" pre-tokenizer) first splits every digit on its own:
  Sequence[Digits(individual_digits=true), ByteLevel(add_prefix_space=false, use_regex=true)].
  The script installs that pre-tokenizer before taking reference ids, so the ids are what
  the real SmolLM2 tokenizer produces.
* Llama 3.2 (models/llama3-tokenizer/tokenizer.json): the file itself, run by `tokenizers`.
* SentencePiece BPE with byte fallback (Llama 2 style): no small wheel ships a Llama 2
  tokenizer, so a tiny one is trained here with sentencepiece (BPE, byte_fallback) and laid
  out exactly as Llama 2's tokenizer.json is (Prepend/Replace normalizer, BPE with
  byte_fallback, Replace/ByteFallback/Fuse/Strip decoder, "<s> $A" template). The same
  pieces, scores and types are also written as a vocab-only GGUF (tokenizer.ggml.model =
  "llama"), the way llama.cpp's converter writes them. Reference ids come from `tokenizers`.

Invalid UTF-8 input is replaced the way Python's bytes.decode("utf-8", errors="replace")
does before tokenizing; those cases carry their raw bytes as hex.
"""
from __future__ import annotations

import io
import json
import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "tokenizer"
MODELS = ROOT / "models"
SMOL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMA3_DIR = MODELS / "llama3-tokenizer"


# ----------------------------------------------------------------------------- strings

HANDWRITTEN = [
    "", " ", "  ", "\t", "\n", "\r\n", "Hello world", "Hello, world!", " Hello world",
    "hello   world", "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see they've done what we'd said it's", "DON'T SHOUT, I'LL HEAR",
    "1234567890", "3.14159265358979", "Year 2024: 1,000,000 people", " 12 345 6789 ",
    "0000000000000000000000000000001", "١٢٣٤٥ ٦٧٨", "①②③ ⅻ ½ ¾",
    "你好，世界！", "我们今天去公园散步，然后吃了很多好吃的东西。", "日本語のテキストです。カタカナとひらがな、漢字。",
    "안녕하세요, 세계! 한국어 문장입니다.", "مرحبا بالعالم، هذه جملة عربية.", "नमस्ते दुनिया, यह हिंदी वाक्य है।",
    "Привет, мир! Это русское предложение.", "Ελληνικά γράμματα αβγδ", "עברית טקסט", "ไทย ภาษา",
    "😀😃😄😁", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "👍🏽 thumbs", "🇯🇵🇺🇸", "❤️‍🔥", "🧑🏿‍💻 coding",
    "<|im_start|>", "<|im_end|>", "<|im_start|>user\nHi<|im_end|>\n", "text <|im_start|> inside",
    "<|im_start", "im_start|>", "<|endoftext|>", "<|end_of_text|>", "<|begin_of_text|>",
    "<|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>", "<|eot_id", "<|eot_id|><|eot_id|>",
    "<|reserved_special_token_5|>", "<s>", "</s>", "<unk>", "<s>Hello</s>",
    "<repo_name>optimate<file_sep>main.cpp", "<jupyter_code>print(1)<jupyter_output>1",
    "<<|im_start|>>", "<|<|im_end|>|>", "<| im_start |>",
    "def main():\n    print(\"hi\")\n\n\nif __name__ == '__main__':\n    main()\n",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v[0]; }\n",
    "fn main() {\n\tlet x: Vec<u8> = vec![0xff; 16];\n\tprintln!(\"{:?}\", x);\n}",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "const f = (a, b) => a ?? b; // nullish\nconsole.log(f(null, 42));",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello\")\n}\n",
    "<html><body><div class=\"x\">&nbsp;&lt;tag&gt;</div></body></html>",
    "{\"key\": [1, 2.5, true, null], \"nested\": {\"a\": \"b\"}}",
    "$ ls -la | grep '\\.cpp$' && echo done", "x = y**2 + 3*z - (4/5) % 6",
    "a\n\nb\n\n\nc", "a\r\nb\r\n\r\nc", "\n\n\n", "   leading", "trailing   ", "\t\ttabs\tinside\t",
    "mixed \t \n whitespace \r\n runs    end", "line1\nline2\rline3\r\n", "\u00a0nbsp\u00a0", "\u3000ideographic space",
    "\u2028line sep\u2029para sep", "zero\u200bwidth", "soft\u00adhyphen", "e\u0301 combining",
    "Ⅻ ℃ ™ © ® µ", "ﬁ ligature", "ｆｕｌｌｗｉｄｔｈ", "𝕳𝖊𝖑𝖑𝖔 math", "\U0001F600\U0001F64F",
    "a" * 300, "ab" * 100, " " * 64, "\n" * 20, "9" * 100, "é" * 50, "🙂" * 20, "中" * 40,
    "Ünïcödé Çàfé naïve résumé", "Straße groß", "İstanbul ıi", "ǅ titlecase",
    "can't won't shouldn't", "'s 't 're 've 'm 'll 'd", "'S 'T 'RE", "it’s curly", "\"quoted\"",
    "tokenizer.ggml.merges", "http://example.com/path?q=1&r=2#frag", "user@example.com",
    "C:\\Windows\\System32", "~/.config/optimate.toml", "--flag=value -x", "$100.00 €50 £20 ¥1000",
    "50% off!!!", "...", "?!?!", "—–-", "«guillemets»", "„German“", "「Japanese quotes」",
]

WORDS_EN = ("the of and to in is you that it he was for on are as with his they at be this have "
            "from or one had by word but not what all were we when your can said there use an each "
            "which she do how their if will up other about out many then them these so some her "
            "would make like him into time has look two more write go see number no way could people "
            "engine token batch latency throughput scheduler kernel memory quantization").split()
SNIPPETS = [
    "你好", "世界", "中文分词", "東京", "ありがとう", "한국", "감사합니다", "السلام", "عليكم", "हिंदी",
    "भाषा", "Москва", "спасибо", "😀", "🚀", "👩‍💻", "🇫🇷", "\t", "\n", "\r\n", "  ", "   ", "123",
    "4567", "3.5", "0x1F", "<|im_start|>", "<|im_end|>", "<|im_", "|>", "<|eot_id|>", "<s>",
    "{", "}", "()", "[]", "=>", "::", "->", "//", "/*", "*/", "#", "@", "__init__", "camelCase",
    "snake_case", "SCREAMING", "x86_64", "C++20", "\u00a0", "ß", "é", "ñ", "ø", "ł",
]


def generated_strings(count: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.45:
                w = rng.choice(WORDS_EN)
                if rng.random() < 0.15:
                    w = w.capitalize() if rng.random() < 0.7 else w.upper()
                parts.append(w)
            elif r < 0.85:
                parts.append(rng.choice(SNIPPETS))
            else:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
        seps = [" ", " ", " ", "", "\n", ", ", ". ", "  ", "\t"]
        s = parts[0]
        for p in parts[1:]:
            s += rng.choice(seps) + p
        if rng.random() < 0.2:
            s = " " + s
        if rng.random() < 0.2:
            s += rng.choice(["\n", " ", "!", "?", "\n\n"])
        out.append(s)
    return out


INVALID_UTF8 = [
    b"\xff", b"abc\xfe\xffdef", b"\xc3", b"caf\xc3", b"\xe4\xb8", b"\xe4\xb8\xadx\xe4",
    b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80\xf0\x9f", b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong",
    b"\xe0\x80\x80", b"\xf4\x90\x80\x80 too big", b"\x80\x80\x80", b"ok \xc3\x28 bad",
    b"\xf8\x88\x80\x80\x80", b"tail \xe2\x82",
]


# ----------------------------------------------------------------------------- references

def smollm2_reference():
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(str(MODELS), gguf_file=SMOL_GGUF)
    tok = hf.backend_tokenizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    return hf, tok


def llama3_reference():
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(str(LLAMA3_DIR))
    return hf, Tokenizer.from_file(str(LLAMA3_DIR / "tokenizer.json"))


def build_spm(corpus: list[str]):
    """Trains a tiny SentencePiece BPE model and writes it as a Llama-2-style tokenizer.json
    and as a vocab-only GGUF."""
    import sentencepiece as spm
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
    from transformers.convert_slow_tokenizer import generate_merges

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus * 3), model_writer=model, model_type="bpe", vocab_size=1200,
        byte_fallback=True, character_coverage=0.98, split_digits=True, add_dummy_prefix=True,
        remove_extra_whitespaces=False, normalization_rule_name="identity", max_sentence_length=100000,
        allow_whitespace_only_pieces=True, bos_id=1, eos_id=2, unk_id=0, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())

    def piece_type(i: int) -> int:  # sentencepiece ModelProto.SentencePiece.Type
        return 2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1

    pieces = [(sp.id_to_piece(i), sp.get_score(i), piece_type(i)) for i in range(sp.get_piece_size())]
    vocab = {p: i for i, (p, _, _) in enumerate(pieces)}

    tok = Tokenizer(models.BPE(vocab=vocab, merges=generate_merges(vocab), unk_token="<unk>",
                               fuse_unk=True, byte_fallback=True))
    tok.add_special_tokens([AddedToken(p, normalized=False, special=True)
                            for p, _, t in pieces if t in (2, 3)])
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                        special_tokens=[("<s>", 1)])
    spm_dir = OUT / "spm_tiny"
    spm_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(spm_dir / "tokenizer.json"))

    import gguf
    # SentencePiece piece types map onto llama.cpp token types: normal 1, unknown 2,
    # control 3, user-defined 4, byte 6.
    type_map = {1: 1, 2: 2, 3: 3, 4: 4, 6: 6}
    w = gguf.GGUFWriter(str(OUT / "spm_tiny.gguf"), "llama")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([p for p, _, _ in pieces])
    w.add_token_scores([float(s) for _, s, _ in pieces])
    w.add_token_types([type_map[t] for _, _, t in pieces])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tok


# ----------------------------------------------------------------------------- cases

def encode_cases(tok, strings, invalid, with_special: bool):
    cases = []
    for s in strings:
        cases.append({"text": s, "ids": tok.encode(s, add_special_tokens=with_special).ids})
    for b in invalid:
        s = b.decode("utf-8", errors="replace")
        cases.append({"bytes_hex": b.hex(), "ids": tok.encode(s, add_special_tokens=with_special).ids})
    return cases


def decode_cases(tok, strings, vocab_size: int, special_ids: list[int], seed: int):
    rng = random.Random(seed)
    seqs = []
    for s in strings[:120]:
        seqs.append(tok.encode(s, add_special_tokens=True).ids)
    for _ in range(80):  # arbitrary sequences: split UTF-8 characters, specials anywhere
        n = rng.randint(1, 24)
        seqs.append([rng.choice(special_ids) if rng.random() < 0.1 else rng.randrange(vocab_size)
                     for _ in range(n)])
    out = []
    for ids in seqs:
        out.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False),
                    "text_skip_special": tok.decode(ids, skip_special_tokens=True)})
    return out


CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3?"}],
    [{"role": "system", "content": "  padded system  \n"}, {"role": "user", "content": "\n  padded user \t"},
     {"role": "assistant", "content": " padded answer\n\n"}],
    [{"role": "user", "content": "你好，请介绍一下你自己。😀"}],
    [{"role": "user", "content": "text with <|im_start|> and <|eot_id|> inside"}],
    [{"role": "user", "content": ""}],
    [{"role": "assistant", "content": "I start the conversation."}, {"role": "user", "content": "ok"}],
    [{"role": "user", "content": "multi\nline\n\nmessage\r\nwith CRLF"}, {"role": "assistant", "content": "Sure."},
     {"role": "user", "content": "```python\nprint('x')\n```"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"}, {"role": "assistant", "content": "A1"},
     {"role": "user", "content": "U2"}, {"role": "assistant", "content": "A2"}, {"role": "user", "content": "U3"}],
    [{"role": "tool_output", "content": "custom role"}, {"role": "user", "content": "\u3000wide space\u00a0"}],
    [{"role": "user", "content": "weather?"}, {"role": "tool", "content": "{\"temp\": \"21°C\"}\n\ttab \\ slash"},
     {"role": "ipython", "content": "out"}],
]

QWEN2_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                  "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
                  "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
                  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


# Meta-Llama-3-8B-Instruct's template (Llama 3.0: no system block).
LLAMA3_0_TEMPLATE = ("{% set loop_messages = messages %}{% for message in loop_messages %}"
                     "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
                     "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
                     "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
                     "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


def chat_cases(hf, tok, template: str, extra: dict):
    out = []
    for msgs in CONVERSATIONS:
        for gen in (False, True):
            text = hf.apply_chat_template(msgs, chat_template=template, tokenize=False,
                                          add_generation_prompt=gen, **extra)
            out.append({"messages": msgs, "add_generation_prompt": gen, "text": text,
                        "ids": tok.encode(text, add_special_tokens=False).ids})
    return out


def write(name: str, obj) -> None:
    path = OUT / name
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    size = path.stat().st_size
    assert size < 2 * 1024 * 1024, f"{path} is {size} bytes"
    print(f"wrote {path.relative_to(ROOT)} ({size} bytes)")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    strings = HANDWRITTEN + generated_strings(520)
    assert len(strings) + len(INVALID_UTF8) >= 500

    smol_hf, smol = smollm2_reference()
    smol_template = smol_hf.chat_template
    llama_hf, llama = llama3_reference()
    llama_template = (OUT / "llama3.2_chat_template.jinja").read_text(encoding="utf-8")
    spm = build_spm(strings)

    write("encode_smollm2.json", {
        "reference": "transformers AutoTokenizer from the GGUF, pre-tokenizer as SmolLM2's tokenizer.json",
        "add_special_tokens": True, "cases": encode_cases(smol, strings, INVALID_UTF8, True)})
    write("encode_llama3.json", {
        "reference": "tokenizers Tokenizer.from_file(models/llama3-tokenizer/tokenizer.json)",
        "add_special_tokens": True, "cases": encode_cases(llama, strings, INVALID_UTF8, True)})
    write("encode_llama3_no_special.json", {
        "reference": "tokenizers, add_special_tokens=False",
        "add_special_tokens": False, "cases": encode_cases(llama, strings[:150], INVALID_UTF8[:4], False)})
    write("encode_spm_tiny.json", {
        "reference": "tokenizers running spm_tiny/tokenizer.json (Llama 2 layout)",
        "add_special_tokens": True, "cases": encode_cases(spm, strings, INVALID_UTF8, True)})

    write("decode_smollm2.json", {"cases": decode_cases(smol, strings, 49152, list(range(17)), 7)})
    write("decode_llama3.json", {"cases": decode_cases(llama, strings, 128256,
                                                       [128000, 128001, 128006, 128007, 128009], 8)})
    write("decode_spm_tiny.json", {"cases": decode_cases(spm, strings, spm.get_vocab_size(), [0, 1, 2], 9)})

    write("chat_smollm2.json", {"template": smol_template,
                                "cases": chat_cases(smol_hf, smol, smol_template, {})})
    write("chat_qwen2.json", {"template": QWEN2_TEMPLATE,
                              "cases": chat_cases(smol_hf, smol, QWEN2_TEMPLATE, {})})
    write("chat_llama3.json", {"template": llama_template, "date_string": "26 Jul 2024",
                               "cases": chat_cases(llama_hf, llama, llama_template,
                                                   {"date_string": "26 Jul 2024"})})
    # Added-token options (lstrip, rstrip, single_word, normalized) on the SentencePiece layout.
    from tokenizers import AddedToken, Tokenizer
    extra = Tokenizer.from_str(spm.to_str())
    extra.add_special_tokens([AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False)])
    extra.add_tokens([AddedToken("[[x]]", single_word=True, normalized=False),
                      AddedToken("zqx", normalized=True), AddedToken("fooé", normalized=False)])
    extra_dir = OUT / "spm_tiny_added"
    extra_dir.mkdir(parents=True, exist_ok=True)
    extra.save(str(extra_dir / "tokenizer.json"))
    extra = Tokenizer.from_file(str(extra_dir / "tokenizer.json"))  # the reference is the file
    added_strings = ["a <tool> b", "a   <tool>\n\t b", "<tool><tool>", "x<tool>y", "[[x]]", "a [[x]] b",
                     "a[[x]]b", "é[[x]]", "_[[x]]", "[[x]]1", "zqx", "say zqx world", "sayzqx",
                     "fooé bar", "<tool> zqx [[x]] fooé", "  zqx  ", "zqx<tool>zqx", "a\u3000<tool>\u00a0b"]
    write("encode_spm_tiny_added.json", {
        "reference": "tokenizers running spm_tiny_added/tokenizer.json",
        "add_special_tokens": True, "cases": encode_cases(extra, added_strings + strings[:100], [], True)})
    write("decode_spm_tiny_added.json", {"cases": decode_cases(extra, added_strings, extra.get_vocab_size(),
                                                               [0, 1, 2, extra.get_vocab_size() - 4], 10)})
    write("chat_llama3.0.json", {"template": LLAMA3_0_TEMPLATE,
                                 "cases": chat_cases(llama_hf, llama, LLAMA3_0_TEMPLATE, {})})
    write("utf8_replace.json", {
        "reference": "bytes.decode('utf-8', errors='replace')",
        "cases": [{"bytes_hex": b.hex(), "text": b.decode("utf-8", errors="replace")} for b in INVALID_UTF8]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
