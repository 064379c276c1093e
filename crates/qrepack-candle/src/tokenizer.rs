//! The GPT-2 style byte-level BPE tokenizer of a GGUF file (`tokenizer.ggml.model = gpt2`:
//! `tokenizer.ggml.tokens` and `tokenizer.ggml.merges`), as llama.cpp runs it.
//!
//! Text is split at the special (control and user-defined) tokens, each other piece is
//! pre-tokenized with GPT-2's pattern (digits first split one by one for the `smollm`,
//! `starcoder` and similar pre-tokenizers, as llama.cpp does), mapped byte by byte to GPT-2's
//! printable characters, and merged pair by pair in merge-rank order.

use std::collections::HashMap;

use candle_core::{bail, Result};
use qrepack::gguf::{GgufFile, GgufValue};

/// A byte-level BPE tokenizer read from GGUF metadata.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
    /// `(left, right)` -> rank (lower merges first).
    merges: HashMap<(String, String), usize>,
    /// Special tokens matched literally in the text, longest first.
    specials: Vec<(String, u32)>,
    /// Ids whose text is printed verbatim (not byte-mapped) when decoding.
    special_ids: Vec<bool>,
    /// Split digits one by one before the GPT-2 pattern.
    split_digits: bool,
    byte_to_char: [char; 256],
    char_to_byte: HashMap<char, u8>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
}

/// GPT-2's map from bytes to printable characters: printable Latin-1 bytes map to themselves,
/// the rest to U+0100 onwards.
fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        out[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('?');
            next += 1;
            c
        };
    }
    out
}

fn strings(g: &GgufFile, key: &str) -> Result<Vec<String>> {
    match g.get(key) {
        Some(GgufValue::Array(_, items)) => items
            .iter()
            .map(|v| match v.as_str() {
                Some(s) => Ok(s.to_string()),
                None => bail!("'{key}' holds a non-string"),
            })
            .collect(),
        Some(other) => bail!("'{key}' is not an array: {}", other.value_type()),
        None => bail!("the GGUF metadata have no '{key}'"),
    }
}

impl Tokenizer {
    /// The tokenizer of a GGUF file; an error unless `tokenizer.ggml.model` is `gpt2`.
    pub fn from_gguf(g: &GgufFile) -> Result<Tokenizer> {
        match g.get("tokenizer.ggml.model").and_then(|v| v.as_str()) {
            Some("gpt2") => {}
            Some(other) => bail!("tokenizer '{other}' is not supported (gpt2 byte-level BPE is)"),
            None => bail!("the GGUF file carries no tokenizer (tokenizer.ggml.model)"),
        }
        let tokens = strings(g, "tokenizer.ggml.tokens")?;
        let merge_list = strings(g, "tokenizer.ggml.merges")?;
        let types: Vec<i64> = match g.get("tokenizer.ggml.token_type") {
            Some(GgufValue::Array(_, items)) => {
                items.iter().map(|v| v.as_i64().unwrap_or(1)).collect()
            }
            _ => vec![1; tokens.len()],
        };
        let mut merges = HashMap::with_capacity(merge_list.len());
        for (rank, m) in merge_list.iter().enumerate() {
            if let Some((a, b)) = m.split_once(' ') {
                merges.entry((a.to_string(), b.to_string())).or_insert(rank);
            }
        }
        let ids: HashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        // 3 = control, 4 = user defined (llama.cpp's token types)
        let special_ids: Vec<bool> = (0..tokens.len())
            .map(|i| matches!(types.get(i), Some(3 | 4)))
            .collect();
        let mut specials: Vec<(String, u32)> = tokens
            .iter()
            .enumerate()
            .filter(|&(i, t)| special_ids[i] && !t.is_empty())
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        specials.sort_by_key(|(t, _)| std::cmp::Reverse(t.len()));
        let pre = g
            .get("tokenizer.ggml.pre")
            .and_then(|v| v.as_str())
            .unwrap_or("default");
        let split_digits = matches!(
            pre,
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva"
        );
        let id = |key: &str| {
            g.get(key)
                .and_then(|v| v.as_u64())
                .map(|v| v as u32)
                .filter(|&v| (v as usize) < tokens.len())
        };
        let byte_to_char = byte_chars();
        let char_to_byte = byte_to_char
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        Ok(Tokenizer {
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            add_bos: g
                .get("tokenizer.ggml.add_bos_token")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            tokens,
            ids,
            merges,
            specials,
            special_ids,
            split_digits,
            byte_to_char,
            char_to_byte,
        })
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The end-of-sequence token, if the file names one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The id of a token's exact text (e.g. `<|im_end|>`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// The ids of `text`, with the beginning-of-sequence token first when the file asks for it
    /// (`tokenizer.ggml.add_bos_token`). Special tokens written in the text are recognized.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        if self.add_bos {
            out.extend(self.bos);
        }
        let mut rest = text;
        while !rest.is_empty() {
            // the earliest special token in `rest` (longest at the same position)
            let found = self
                .specials
                .iter()
                .filter_map(|(s, id)| rest.find(s.as_str()).map(|at| (at, s.len(), *id)))
                .min_by_key(|&(at, len, _)| (at, std::cmp::Reverse(len)));
            match found {
                Some((at, len, id)) => {
                    self.encode_plain(&rest[..at], &mut out);
                    out.push(id);
                    rest = &rest[at + len..];
                }
                None => {
                    self.encode_plain(rest, &mut out);
                    rest = "";
                }
            }
        }
        out
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        for piece in pre_tokenize(text, self.split_digits) {
            let mapped: String = piece
                .bytes()
                .map(|b| self.byte_to_char[b as usize])
                .collect();
            if let Some(&id) = self.ids.get(&mapped) {
                out.push(id);
                continue;
            }
            for symbol in self.bpe(&mapped) {
                match self.ids.get(&symbol) {
                    Some(&id) => out.push(id),
                    // every byte is a token in a byte-level vocabulary; skip if not
                    None => {
                        for c in symbol.chars() {
                            out.extend(self.ids.get(&c.to_string()));
                        }
                    }
                }
            }
        }
    }

    /// Merges the characters of `word` by merge rank.
    fn bpe(&self, word: &str) -> Vec<String> {
        let mut symbols: Vec<String> = word.chars().map(String::from).collect();
        loop {
            let best = symbols
                .windows(2)
                .enumerate()
                .filter_map(|(i, w)| {
                    self.merges
                        .get(&(w[0].clone(), w[1].clone()))
                        .map(|&r| (r, i))
                })
                .min();
            let Some((_, i)) = best else { break };
            let right = symbols.remove(i + 1);
            symbols[i].push_str(&right);
        }
        symbols
    }

    /// The text of `ids` (special tokens written out; invalid UTF-8 replaced).
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            let Some(t) = self.tokens.get(id as usize) else {
                continue;
            };
            if self.special_ids[id as usize] {
                bytes.extend_from_slice(t.as_bytes());
            } else {
                for c in t.chars() {
                    match self.char_to_byte.get(&c) {
                        Some(&b) => bytes.push(b),
                        None => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Splits `text` with GPT-2's pattern
/// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
/// after isolating every digit when `split_digits`.
pub fn pre_tokenize(text: &str, split_digits: bool) -> Vec<&str> {
    let mut out = Vec::new();
    if split_digits {
        let mut start = 0;
        for (i, c) in text.char_indices() {
            if c.is_numeric() {
                gpt2_split(&text[start..i], &mut out);
                out.push(&text[i..i + c.len_utf8()]);
                start = i + c.len_utf8();
            }
        }
        gpt2_split(&text[start..], &mut out);
    } else {
        gpt2_split(text, &mut out);
    }
    out
}

fn gpt2_split<'a>(text: &'a str, out: &mut Vec<&'a str>) {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let n = chars.len();
    let at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let offset = |i: usize| chars.get(i).map_or(text.len(), |&(o, _)| o);
    let letter = |c: char| c.is_alphabetic();
    let number = |c: char| c.is_numeric();
    let other = |c: char| !c.is_whitespace() && !c.is_alphabetic() && !c.is_numeric();
    let mut i = 0;
    while i < n {
        let c = chars[i].1;
        let run = |from: usize, class: &dyn Fn(char) -> bool| {
            let mut j = from;
            while at(j).is_some_and(class) {
                j += 1;
            }
            j
        };
        // contractions
        if c == '\'' {
            let rest = &text[offset(i)..];
            if let Some(len) = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
                .iter()
                .find(|s| rest.starts_with(**s))
                .map(|s| s.chars().count())
            {
                out.push(&text[offset(i)..offset(i + len)]);
                i += len;
                continue;
            }
        }
        // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
        let body = if c == ' ' { i + 1 } else { i };
        let classes: [&dyn Fn(char) -> bool; 3] = [&letter, &number, &other];
        if let Some(class) = classes.iter().find(|f| at(body).is_some_and(f)) {
            let end = run(body, *class);
            out.push(&text[offset(i)..offset(end)]);
            i = end;
            continue;
        }
        // `\s+(?!\S)|\s+`
        let end = run(i, &|c: char| c.is_whitespace());
        let end = if end < n && end - i > 1 {
            end - 1
        } else {
            end.max(i + 1)
        };
        out.push(&text[offset(i)..offset(end)]);
        i = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_pattern() {
        assert_eq!(
            pre_tokenize("Hello world, it's  2024!\n\nOk", false),
            vec!["Hello", " world", ",", " it", "'s", " ", " 2024", "!", "\n", "\n", "Ok"]
        );
        assert_eq!(
            pre_tokenize("ab 123x", true),
            vec!["ab", " ", "1", "2", "3", "x"]
        );
        assert_eq!(pre_tokenize("a   ", false), vec!["a", "   "]);
        assert_eq!(pre_tokenize("x\n\n", false), vec!["x", "\n\n"]);
        assert_eq!(pre_tokenize(" \tb", false), vec![" ", "\t", "b"]);
    }

    #[test]
    fn byte_map_is_a_bijection() {
        let m = byte_chars();
        let mut seen = std::collections::HashSet::new();
        assert!(m.iter().all(|c| seen.insert(*c)));
        assert_eq!(m[b' ' as usize], 'Ġ');
        assert_eq!(m[b'\n' as usize], 'Ċ');
    }
}
