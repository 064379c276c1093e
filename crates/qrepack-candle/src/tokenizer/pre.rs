//! The pre-tokenizers of byte-level BPE vocabularies: the text cut into pieces by a list of
//! regular expressions, before each piece is merged on its own. Which list a file gets is named
//! by `tokenizer.ggml.pre`, as llama.cpp names and applies them (`llm_tokenizer_bpe`): each
//! expression cuts every piece the previous ones left into its matches and the text between
//! them, and a match never looks past the end of its piece.
//!
//! The expressions are those of the models' own `tokenizer.json` files, run by `fancy-regex`
//! (look-ahead, Unicode classes); llama.cpp carries versions rewritten for `std::regex` that
//! split text the same way.

use std::sync::OnceLock;

use candle_core::{bail, Result};
use fancy_regex::Regex;

/// GPT-2's pattern, the base of many others.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Llama 3's pattern: contractions in any case, a letter run with one leading non-letter,
/// numbers in groups of up to three digits.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's: Llama 3's with single digits.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5's: Qwen2's with combining marks inside letter runs.
const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GPT-4o's (o200k, gpt-oss): words split at case changes, contractions attached.
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Mistral's Tekken: GPT-4o's without contractions, single digits.
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// DeepSeek V3's: digit groups, CJK runs, then a GPT-4o-like pattern.
const DEEPSEEK3: [&str; 3] = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
];

/// The expressions of each pre-tokenizer name llama.cpp knows, for the families implemented.
fn expressions(pre: &str) -> Option<Vec<&'static str>> {
    Some(match pre {
        // llama.cpp's fallback for files that do not name one
        "default" => vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" | "dbrx" | "smaug-bpe" | "glm4" | "chatglm-bpe" => vec![LLAMA3],
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "stablelm2" | "hunyuan"
        | "solar-open" => vec![QWEN2],
        "qwen35" => vec![QWEN35],
        "gpt-4o" | "minimax-m2" => vec![GPT4O],
        "tekken" => vec![TEKKEN],
        "deepseek-v3" => DEEPSEEK3.to_vec(),
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe"
        | "mpt" | "olmo" | "jais" | "trillion" | "granite-docling" => vec![GPT2],
        // digits one by one, then GPT-2's pattern
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva"
        | "mellum2" => vec![r"\p{N}", GPT2],
        "falcon" => vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
        "poro-chat" | "bloom" | "gpt3-finnish" => vec![r" ?[^(\s|.,!?…。，、।۔،)]+"],
        "viking" => vec![r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"],
        _ => return None,
    })
}

/// The pre-tokenizer of one vocabulary. Its expressions are compiled on the first text split:
/// with their Unicode classes they take about a megabyte, which a model fed token ids never
/// needs.
#[derive(Clone, Debug)]
pub struct PreTokenizer {
    name: String,
    sources: Vec<&'static str>,
    compiled: OnceLock<Vec<Regex>>,
}

impl PreTokenizer {
    /// The pre-tokenizer llama.cpp runs for `tokenizer.ggml.pre = name`; an error naming it
    /// when this crate does not implement it.
    pub fn new(name: &str) -> Result<PreTokenizer> {
        let Some(sources) = expressions(name) else {
            bail!("the pre-tokenizer '{name}' (tokenizer.ggml.pre) is not supported");
        };
        Ok(PreTokenizer {
            name: name.to_string(),
            sources,
            compiled: OnceLock::new(),
        })
    }

    /// The compiled expressions. Each is a constant of this module that the tests compile, so
    /// none fails; one that did would split nothing.
    fn expressions(&self) -> &[Regex] {
        self.compiled.get_or_init(|| {
            self.sources
                .iter()
                .filter_map(|s| Regex::new(s).ok())
                .collect()
        })
    }

    /// Its `tokenizer.ggml.pre` name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pieces of `text`, in order; together they are `text`.
    pub fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut pieces = vec![text];
        for re in self.expressions() {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                let mut last = 0;
                // a match the backtracking limit stops is left unsplit, with the rest
                for m in re.find_iter(piece).map_while(|m| m.ok()) {
                    if m.start() == m.end() {
                        continue;
                    }
                    if m.start() > last {
                        next.push(&piece[last..m.start()]);
                    }
                    next.push(m.as_str());
                    last = m.end();
                }
                if last < piece.len() {
                    next.push(&piece[last..]);
                }
            }
            pieces = next;
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pre: &str, text: &str) -> Vec<String> {
        PreTokenizer::new(pre)
            .unwrap()
            .split(text)
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    /// Pieces written out by hand from each pattern's definition.
    #[test]
    fn patterns_split_as_defined() {
        assert_eq!(
            split("gpt-2", "Hello world, it's  2024!\n\nOk"),
            ["Hello", " world", ",", " it", "'s", " ", " 2024", "!", "\n", "\n", "Ok"]
        );
        assert_eq!(split("smollm", "ab 123x"), ["ab", " ", "1", "2", "3", "x"]);
        // Llama 3: digits by threes, a punctuation mark joined to the word after it, upper-case
        // contractions, newlines kept together
        assert_eq!(
            split("llama-bpe", "I'LL pay 12345 (now)!\n\n  ok"),
            ["I", "'LL", " pay", " ", "123", "45", " (", "now", ")!\n\n", " ", " ok"]
        );
        // Qwen2: single digits
        assert_eq!(split("qwen2", "x=2024"), ["x", "=", "2", "0", "2", "4"]);
        // GPT-4o: a word cut where lower case turns upper, the contraction kept on the word
        assert_eq!(
            split("gpt-4o", "helloWorld don't 1234"),
            ["hello", "World", " don't", " ", "123", "4"]
        );
        // the default: punctuation runs first, then GPT-2's pattern, numbers by threes
        assert_eq!(
            split("default", "a+b 12345"),
            ["a", "+", "b", " ", "123", "45"]
        );
    }

    /// A name of every expression list.
    const NAMES: [&str; 12] = [
        "default",
        "llama3",
        "qwen2",
        "qwen35",
        "gpt-4o",
        "tekken",
        "deepseek-v3",
        "gpt-2",
        "smollm",
        "falcon",
        "bloom",
        "viking",
    ];

    #[test]
    fn pieces_cover_the_text() {
        let text = "Ünïcödé text — with 42 numbers, CamelCase, tabs\tand\r\nlines  ";
        for pre in NAMES {
            assert_eq!(split(pre, text).concat(), text, "{pre}");
        }
    }

    #[test]
    fn every_expression_compiles() {
        for name in NAMES {
            let sources = expressions(name).unwrap();
            for s in &sources {
                assert!(Regex::new(s).is_ok(), "{name}: {s}");
            }
            assert_eq!(
                PreTokenizer::new(name).unwrap().expressions().len(),
                sources.len()
            );
        }
    }

    #[test]
    fn unknown_names_are_errors() {
        let err = PreTokenizer::new("no-such-pre").unwrap_err().to_string();
        assert!(err.contains("'no-such-pre'"), "{err}");
    }
}
