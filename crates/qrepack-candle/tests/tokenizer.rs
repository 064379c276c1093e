//! The byte-level BPE tokenizer against llama.cpp's on the same vocabulary: a tiny vocabulary
//! (the 256 byte symbols and merges that cross the boundaries some pre-tokenizers draw and
//! others do not: digit groups, a punctuation mark before a word, an upper-case contraction, a
//! camel-case word, runs of spaces and newlines) written under several `tokenizer.ggml.pre`
//! names. How each name cuts the text decides which merges can apply, so the ids differ from
//! name to name; `tests/fixtures/llama_cpp_token_ids.txt` holds llama.cpp's ids for each name
//! and text, made by `scripts/llama_token_ids.sh` from the files [`write_bpe_files`] writes.

mod common;

use common::Tiny;
use qrepack::gguf::{GgufFile, GgufValue, GgufValueType, GgufWriter};
use qrepack_candle::{ChatTemplate, Tokenizer};

/// The pre-tokenizer names the fixture covers.
pub const PRE_NAMES: [&str; 7] = [
    "default",
    "gpt-2",
    "smollm",
    "llama-bpe",
    "qwen2",
    "gpt-4o",
    "tekken",
];

/// The texts the fixture covers, one per line there (`\n` written as `\\n`).
pub const TEXTS: [&str; 5] = [
    "I'LL pay 12345 (now)!\n\n  ok",
    "x.append(self) HelloWorld don't",
    "na\u{ef}ve \u{e9}migr\u{e9} \u{6771}\u{4eac} \u{1f600}\t\r\n end  ",
    "a+b=c; 3.14159 don'T",
    "  leading spaces\n\n\nand 1 22 333 4444 trailing \n",
];

/// GPT-2's map from bytes to printable characters.
fn byte_chars() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut next = 256;
    (0..256u32)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap()
            } else {
                next += 1;
                char::from_u32(next - 1).unwrap()
            }
        })
        .collect()
}

/// Merges (in GPT-2's byte symbols: `Ġ` a space, `Ċ` a newline), lowest rank first.
const MERGES: [&str; 33] = [
    "1 2",
    "12 3",
    "4 5",
    "' L",
    "'L L",
    "( s",
    "e l",
    "el f",
    "(s elf",
    ". a",
    "H e",
    "l l",
    "He ll",
    "Hell o",
    "W o",
    "r l",
    "rl d",
    "Wo rld",
    "Hello World",
    "Ġ Ġ",
    "Ċ Ċ",
    "Ġ o",
    "Ġo k",
    "d o",
    "do n",
    "don '",
    "don' t",
    "+ b",
    "Ġ p",
    "Ġp a",
    "Ġpa y",
    "' T",
    "ĠĠ Ġ",
];

/// The tiny Llama file of [`Tiny::llama`] with the vocabulary above under `pre`.
fn bpe_file(pre: &str) -> Vec<u8> {
    bpe_file_with(pre, &[])
}

/// [`bpe_file`] with `specials` as control tokens after the merged ones.
fn bpe_file_with(pre: &str, specials: &[&str]) -> Vec<u8> {
    let t = Tiny {
        vocab: 320,
        ..Tiny::llama()
    };
    let g = GgufFile::from_bytes(t.gguf(3)).unwrap();
    let mut tokens: Vec<String> = byte_chars().iter().map(char::to_string).collect();
    for m in MERGES {
        let (a, b) = m.split_once(' ').unwrap();
        tokens.push(format!("{a}{b}"));
    }
    let first_special = tokens.len();
    tokens.extend(specials.iter().map(|s| s.to_string()));
    // 1 = normal, 3 = control (llama.cpp's token types)
    let types: Vec<GgufValue> = (0..t.vocab)
        .map(|i| {
            GgufValue::I32(if (first_special..tokens.len()).contains(&i) {
                3
            } else {
                1
            })
        })
        .collect();
    while tokens.len() < t.vocab {
        tokens.push(format!("<unused{}>", tokens.len()));
    }
    let strings = |v: Vec<String>| {
        GgufValue::Array(
            GgufValueType::String,
            v.into_iter().map(GgufValue::String).collect(),
        )
    };
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        let v = match k {
            "tokenizer.ggml.tokens" => strings(tokens.clone()),
            "tokenizer.ggml.merges" => strings(MERGES.iter().map(|m| m.to_string()).collect()),
            _ => v.clone(),
        };
        w.add_kv(k, v).unwrap();
    }
    w.add_kv("tokenizer.ggml.pre", GgufValue::String(pre.into()))
        .unwrap();
    w.add_kv(
        "tokenizer.ggml.token_type",
        GgufValue::Array(GgufValueType::I32, types),
    )
    .unwrap();
    w.add_kv("tokenizer.ggml.add_bos_token", GgufValue::Bool(false))
        .unwrap();
    for t in g.tensors() {
        w.add_tensor(&t.name, &t.dims, t.type_id, g.tensor_bytes(t))
            .unwrap();
    }
    w.to_bytes().unwrap()
}

#[test]
fn byte_level_bpe_matches_llama_cpp() {
    let fixture = include_str!("fixtures/llama_cpp_token_ids.txt");
    let mut checked = 0;
    let mut distinct = std::collections::BTreeSet::new();
    let mut tokenizers = std::collections::HashMap::new();
    for line in fixture.lines().filter(|l| !l.starts_with('#')) {
        // `pre <TAB> text index <TAB> ids`
        let mut fields = line.split('\t');
        let (pre, text, ids) = (
            fields.next().unwrap(),
            fields.next().unwrap(),
            fields.next().unwrap(),
        );
        let text = TEXTS[text.parse::<usize>().unwrap()];
        let want: Vec<u32> = ids.split(',').map(|i| i.parse().unwrap()).collect();
        let tok = tokenizers.entry(pre).or_insert_with(|| {
            Tokenizer::from_gguf(&GgufFile::from_bytes(bpe_file(pre)).unwrap()).unwrap()
        });
        assert_eq!(tok.encode(text), want, "{pre}: {text:?}");
        assert_eq!(tok.decode(&want), text, "{pre}: {text:?}");
        distinct.insert((text, want));
        checked += 1;
    }
    assert_eq!(checked, PRE_NAMES.len() * TEXTS.len());
    // the names cut the texts differently: more than one id list per text
    assert!(distinct.len() > TEXTS.len() + 5, "{}", distinct.len());
}

/// Each family's chat template is found by its special tokens, and its prompt encodes them as
/// single tokens around the message.
#[test]
fn chat_templates_by_special_tokens() {
    let cases: [(&[&str], ChatTemplate, &[&str]); 4] = [
        (
            &["<|im_start|>", "<|im_end|>"],
            ChatTemplate::ChatMl,
            &["<|im_start|>", "<|im_end|>", "<|im_start|>"],
        ),
        (
            &["<start_of_turn>", "<end_of_turn>"],
            ChatTemplate::Gemma,
            &["<start_of_turn>", "<end_of_turn>", "<start_of_turn>"],
        ),
        (
            &["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
            ChatTemplate::Llama3,
            &[
                "<|start_header_id|>",
                "<|end_header_id|>",
                "<|eot_id|>",
                "<|start_header_id|>",
                "<|end_header_id|>",
            ],
        ),
        (
            &["<|start|>", "<|message|>", "<|end|>", "<|return|>"],
            ChatTemplate::Harmony,
            &["<|start|>", "<|message|>", "<|end|>", "<|start|>"],
        ),
    ];
    for (specials, want, order) in cases {
        let g = GgufFile::from_bytes(bpe_file_with("llama-bpe", specials)).unwrap();
        let tok = Tokenizer::from_gguf(&g).unwrap();
        let template = ChatTemplate::detect(&tok).expect("a template");
        assert_eq!(template, want);
        let ids = tok.encode(&template.prompt("Hello"));
        let special: Vec<u32> = ids.iter().copied().filter(|&i| i >= 289).collect();
        let expected: Vec<u32> = order.iter().map(|s| tok.token_id(s).unwrap()).collect();
        assert_eq!(special, expected, "{want:?}");
        assert!(tok.decode(&ids).contains("Hello"));
        assert!(tok.token_id(template.end_of_turn()).is_some());
    }
    let plain = Tokenizer::from_gguf(&GgufFile::from_bytes(bpe_file("gpt-2")).unwrap()).unwrap();
    assert_eq!(ChatTemplate::detect(&plain), None);
}

/// Writes the vocabulary under each name to `QREPACK_TINY_DIR/tiny-bpe-NAME.gguf`, for
/// `scripts/llama_token_ids.sh`:
///
/// ```text
/// QREPACK_TINY_DIR=/tmp/tiny cargo test --release -p qrepack-candle --test tokenizer \
///     write_bpe_files -- --ignored
/// ```
#[test]
#[ignore = "needs QREPACK_TINY_DIR (see the test's documentation)"]
fn write_bpe_files() {
    let dir = std::env::var("QREPACK_TINY_DIR").expect("set QREPACK_TINY_DIR to a folder");
    std::fs::create_dir_all(&dir).unwrap();
    for pre in PRE_NAMES {
        let path = std::path::Path::new(&dir).join(format!("tiny-bpe-{pre}.gguf"));
        std::fs::write(&path, bpe_file(pre)).unwrap();
    }
    let texts: Vec<String> = TEXTS.iter().map(|t| t.replace('\n', "\\n")).collect();
    std::fs::write(
        std::path::Path::new(&dir).join("tiny-bpe-texts.txt"),
        texts.join("\n") + "\n",
    )
    .unwrap();
}
