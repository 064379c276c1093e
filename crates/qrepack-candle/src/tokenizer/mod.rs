//! The tokenizers of GGUF files, as llama.cpp runs them: GPT-2 style byte-level BPE
//! (`tokenizer.ggml.model = gpt2`: `tokenizer.ggml.tokens` and `tokenizer.ggml.merges`) and
//! SentencePiece-style BPE (`llama`: tokens and `tokenizer.ggml.scores`; Llama 2, Gemma).
//!
//! Text is split at the special (control and user-defined) tokens. For `gpt2`, each other
//! piece is pre-tokenized by the expressions `tokenizer.ggml.pre` names ([`PreTokenizer`]:
//! Llama 3's, Qwen2's, GPT-4o's, GPT-2's, ... as llama.cpp applies them), mapped byte by
//! byte to GPT-2's printable characters, and merged pair by pair in merge-rank order. For `llama`,
//! spaces become `▁` (with one in front when `tokenizer.ggml.add_space_prefix`), the
//! characters are merged pair by pair, highest-scoring token first, and characters that are no
//! token fall back to their UTF-8 bytes (`<0x41>` tokens).

use std::collections::HashMap;

use candle_core::{bail, Result};
use qrepack::gguf::GgufFile;

mod pre;

pub use pre::PreTokenizer;

/// The token texts, one after the other in one string, and the ids sorted by text: a
/// vocabulary of 150,000 to 260,000 tokens held in a few megabytes (four bytes of index per
/// token), without an allocation per token.
#[derive(Clone, Debug)]
struct Vocab {
    text: String,
    /// Token `i` is `text[offsets[i]..offsets[i + 1]]`.
    offsets: Vec<u32>,
    /// The ids ordered by their text (equal texts by id), for lookups by binary search.
    by_text: Vec<u32>,
}

impl Vocab {
    /// The vocabulary of `tokens`, and the first 8 bytes of each text in the sorted order (for
    /// [`Vocab::id_with`] while a tokenizer is being built).
    fn new(tokens: &[&str]) -> Result<(Vocab, Vec<u64>)> {
        let total: usize = tokens.iter().map(|t| t.len()).sum();
        if total >= u32::MAX as usize || tokens.len() >= u32::MAX as usize {
            bail!(
                "a vocabulary of {} tokens, {total} bytes, is too large",
                tokens.len()
            );
        }
        let mut text = String::with_capacity(total);
        let mut offsets = Vec::with_capacity(tokens.len() + 1);
        offsets.push(0);
        for t in tokens {
            text.push_str(t);
            offsets.push(text.len() as u32);
        }
        // sorted by the first 8 bytes as one number (a sort of plain pairs), then each run of
        // equal prefixes by the whole text: the order of the texts alone, for a fraction of the
        // string comparisons
        let mut keyed: Vec<(u64, u32)> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (prefix(t), i as u32))
            .collect();
        keyed.sort_unstable();
        for run in keyed.chunk_by_mut(|a, b| a.0 == b.0) {
            if run.len() > 1 {
                run.sort_unstable_by(|a, b| {
                    tokens[a.1 as usize]
                        .cmp(tokens[b.1 as usize])
                        .then(a.1.cmp(&b.1))
                });
            }
        }
        let by_text = keyed.iter().map(|&(_, i)| i).collect();
        let sorted_prefixes = keyed.iter().map(|&(p, _)| p).collect();
        Ok((
            Vocab {
                text,
                offsets,
                by_text,
            },
            sorted_prefixes,
        ))
    }

    fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    fn get(&self, id: u32) -> Option<&str> {
        ((id as usize) < self.len()).then(|| token_text(&self.text, &self.offsets, id))
    }

    /// The id of `text`; of equal texts the last, as llama.cpp's map filled in order keeps.
    fn id(&self, text: &str) -> Option<u32> {
        self.id_with(text, None)
    }

    /// [`Vocab::id`], comparing the first 8 bytes as numbers first where `prefixes` (from
    /// [`Vocab::new`]) are given.
    fn id_with(&self, text: &str, prefixes: Option<&[u64]>) -> Option<u32> {
        let key = prefix(text);
        let at = |i: usize| token_text(&self.text, &self.offsets, self.by_text[i]);
        let (mut lo, mut hi) = (0, self.by_text.len());
        // the first position whose text is greater than `text`
        while lo < hi {
            let mid = (lo + hi) / 2;
            let order = match prefixes {
                Some(p) => p[mid].cmp(&key).then_with(|| at(mid).cmp(text)),
                None => at(mid).cmp(text),
            };
            if order.is_le() {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let last = lo.checked_sub(1)?;
        (at(last) == text).then_some(self.by_text[last])
    }
}

/// The first 8 bytes of `text` as a big-endian number (zeros past its end): numbers in the
/// order of the texts, where they differ.
fn prefix(text: &str) -> u64 {
    let mut b = [0u8; 8];
    let n = text.len().min(8);
    b[..n].copy_from_slice(&text.as_bytes()[..n]);
    u64::from_be_bytes(b)
}

/// Token `id`'s text (`id` in range).
fn token_text<'a>(text: &'a str, offsets: &[u32], id: u32) -> &'a str {
    let i = id as usize;
    &text[offsets[i] as usize..offsets[i + 1] as usize]
}

/// The BPE merges as one sorted array of `left | right | rank` packed in 21 bits each: 8 bytes
/// a merge (a hash map took 17, 850 KB for SmolLM2's 48,900), looked up by binary search.
#[derive(Clone, Debug, Default)]
struct MergeTable {
    packed: Vec<u64>,
}

/// Bits of each packed field: room for 2,097,152 tokens and as many merges (the largest
/// vocabularies in use have about 260,000).
const MERGE_FIELD_BITS: u32 = 21;
const MERGE_FIELD_MASK: u64 = (1 << MERGE_FIELD_BITS) - 1;

impl MergeTable {
    /// The table of `merges` in rank order (`None`: a merge that can never apply, skipped); of
    /// repeated pairs the first rank counts.
    fn new(merges: impl ExactSizeIterator<Item = Option<(u32, u32)>>) -> Result<MergeTable> {
        let limit = 1u64 << MERGE_FIELD_BITS;
        if merges.len() as u64 >= limit {
            bail!(
                "{} BPE merges are more than this tokenizer holds ({limit})",
                merges.len()
            );
        }
        let mut packed = Vec::with_capacity(merges.len());
        for (rank, pair) in merges.enumerate() {
            let Some((a, b)) = pair else { continue };
            if u64::from(a.max(b)) >= limit {
                bail!("token id {} is beyond this tokenizer's {limit}", a.max(b));
            }
            packed.push(Self::key(a, b) | rank as u64);
        }
        packed.sort_unstable();
        // equal pairs sort by rank: keep the first
        packed.dedup_by(|later, first| *later >> MERGE_FIELD_BITS == *first >> MERGE_FIELD_BITS);
        packed.shrink_to_fit();
        Ok(MergeTable { packed })
    }

    fn key(a: u32, b: u32) -> u64 {
        (u64::from(a) << (2 * MERGE_FIELD_BITS)) | (u64::from(b) << MERGE_FIELD_BITS)
    }

    /// The rank of merging `a` with `b`, if they merge.
    fn rank(&self, a: u32, b: u32) -> Option<u32> {
        let limit = 1u32 << MERGE_FIELD_BITS;
        if a >= limit || b >= limit {
            return None;
        }
        let key = Self::key(a, b);
        let at = self.packed.partition_point(|&m| m < key);
        let m = *self.packed.get(at)?;
        (m >> MERGE_FIELD_BITS == key >> MERGE_FIELD_BITS).then_some((m & MERGE_FIELD_MASK) as u32)
    }
}

/// A byte-level BPE tokenizer read from GGUF metadata.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    vocab: Vocab,
    /// The merges, `(left, right)` token ids -> rank (lower merges first).
    merges: MergeTable,
    /// Special tokens matched literally in the text, longest first.
    specials: Vec<(String, u32)>,
    /// Ids whose text is printed verbatim (not byte-mapped) when decoding.
    special_ids: Vec<bool>,
    /// How a byte-level BPE vocabulary cuts text into pieces (`None` for SentencePiece).
    pre: Option<PreTokenizer>,
    /// The token scores of a SentencePiece-style vocabulary (`None`: GPT-2 byte-level BPE).
    spm_scores: Option<Vec<f32>>,
    /// SentencePiece: a `▁` in front of the text.
    add_space_prefix: bool,
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

/// The strings of the array `key`, read in place (no value kept per element).
fn strings<'a>(g: &'a GgufFile, key: &str) -> Result<Vec<&'a str>> {
    match g.str_array(key) {
        Some(v) => Ok(v),
        None if g.get(key).is_none() => bail!("the GGUF metadata have no '{key}'"),
        None => bail!("'{key}' is not an array of UTF-8 strings"),
    }
}

impl Tokenizer {
    /// The tokenizer of a GGUF file; an error unless `tokenizer.ggml.model` is `gpt2` or
    /// `llama`.
    pub fn from_gguf(g: &GgufFile) -> Result<Tokenizer> {
        let spm = match g.get("tokenizer.ggml.model").and_then(|v| v.as_str()) {
            Some("gpt2") => false,
            Some("llama") => true,
            Some(other) => bail!(
                "tokenizer '{other}' is not supported (gpt2 byte-level BPE and llama \
                 SentencePiece are)"
            ),
            None => bail!("the GGUF file carries no tokenizer (tokenizer.ggml.model)"),
        };
        let tokens = strings(g, "tokenizer.ggml.tokens")?;
        let merge_list = if spm {
            Vec::new()
        } else {
            strings(g, "tokenizer.ggml.merges")?
        };
        let spm_scores = if spm {
            let scores: Vec<f32> = match g.number_array("tokenizer.ggml.scores") {
                Some(v) => v.into_iter().map(|x| x as f32).collect(),
                _ => bail!("a llama (SentencePiece) tokenizer needs 'tokenizer.ggml.scores'"),
            };
            if scores.len() != tokens.len() {
                bail!("{} token scores for {} tokens", scores.len(), tokens.len());
            }
            Some(scores)
        } else {
            None
        };
        let types: Vec<i64> = match g.number_array("tokenizer.ggml.token_type") {
            Some(v) => v.into_iter().map(|x| x as i64).collect(),
            _ => vec![1; tokens.len()],
        };
        let (vocab, prefixes) = Vocab::new(&tokens)?;
        // a merge of texts that are no tokens can never apply: every symbol is a token
        let merges = MergeTable::new(merge_list.iter().map(|m| {
            let (a, b) = m.split_once(' ')?;
            let id = |t| vocab.id_with(t, Some(&prefixes));
            Some((id(a)?, id(b)?))
        }))?;
        // 3 = control, 4 = user defined (llama.cpp's token types)
        let special_ids: Vec<bool> = (0..tokens.len())
            .map(|i| matches!(types.get(i), Some(3 | 4)))
            .collect();
        let mut specials: Vec<(String, u32)> = tokens
            .iter()
            .enumerate()
            .filter(|&(i, t)| special_ids[i] && !t.is_empty())
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        specials.sort_by_key(|(t, _)| std::cmp::Reverse(t.len()));
        let pre = if spm {
            None
        } else {
            let name = g
                .get("tokenizer.ggml.pre")
                .and_then(|v| v.as_str())
                .unwrap_or("default");
            Some(PreTokenizer::new(name)?)
        };
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
        let tokenizer = Tokenizer {
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            add_bos: g
                .get("tokenizer.ggml.add_bos_token")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            vocab,
            merges,
            specials,
            special_ids,
            pre,
            spm_scores,
            // llama.cpp's default for SentencePiece vocabularies is true
            add_space_prefix: g
                .get("tokenizer.ggml.add_space_prefix")
                .and_then(|v| v.as_bool())
                .unwrap_or(true),
            byte_to_char,
            char_to_byte,
        };
        // the vocabulary is copied out: the metadata's pages need not stay resident
        g.release_metadata_pages();
        Ok(tokenizer)
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The end-of-sequence token, if the file names one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The id of a token's exact text (e.g. `<|im_end|>`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    /// The ids of `text`, with the beginning-of-sequence token first when the file asks for it
    /// (`tokenizer.ggml.add_bos_token`). Special tokens written in the text are recognized.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        if self.add_bos {
            out.extend(self.bos);
        }
        let mut rest = text;
        let mut first = true;
        while !rest.is_empty() {
            // the earliest special token in `rest` (longest at the same position)
            let found = self
                .specials
                .iter()
                .filter_map(|(s, id)| rest.find(s.as_str()).map(|at| (at, s.len(), *id)))
                .min_by_key(|&(at, len, _)| (at, std::cmp::Reverse(len)));
            match found {
                Some((at, len, id)) => {
                    self.encode_plain(&rest[..at], first, &mut out);
                    out.push(id);
                    rest = &rest[at + len..];
                }
                None => {
                    self.encode_plain(rest, first, &mut out);
                    rest = "";
                }
            }
            first = false;
        }
        out
    }

    /// Text without special tokens; `first`: it starts the input (where SentencePiece adds its
    /// space prefix).
    fn encode_plain(&self, text: &str, first: bool, out: &mut Vec<u32>) {
        if let Some(scores) = &self.spm_scores {
            if text.is_empty() {
                return;
            }
            let prefix = if first && self.add_space_prefix {
                "\u{2581}"
            } else {
                ""
            };
            let escaped = format!("{prefix}{}", text.replace(' ', "\u{2581}"));
            self.spm(&escaped, scores, out);
            return;
        }
        let pieces = match &self.pre {
            Some(pre) => pre.split(text),
            None => vec![text],
        };
        for piece in pieces {
            let mapped: String = piece
                .bytes()
                .map(|b| self.byte_to_char[b as usize])
                .collect();
            if let Some(id) = self.vocab.id(&mapped) {
                out.push(id);
                continue;
            }
            for symbol in self.bpe(&mapped) {
                match self.vocab.id(&symbol) {
                    Some(id) => out.push(id),
                    // every byte is a token in a byte-level vocabulary; skip if not
                    None => {
                        for c in symbol.chars() {
                            out.extend(self.vocab.id(c.encode_utf8(&mut [0; 4])));
                        }
                    }
                }
            }
        }
    }

    /// SentencePiece BPE (llama.cpp's `llm_tokenizer_spm`): merges the neighbouring symbols
    /// whose concatenation is the highest-scoring token (the leftmost on ties) until no pair is
    /// a token; symbols that are no token become their bytes' `<0xXX>` tokens.
    fn spm(&self, text: &str, scores: &[f32], out: &mut Vec<u32>) {
        let mut symbols: Vec<String> = text.chars().map(String::from).collect();
        let mut joined = String::new();
        loop {
            let mut best: Option<(f32, usize)> = None;
            for (i, pair) in symbols.windows(2).enumerate() {
                joined.clear();
                joined.push_str(&pair[0]);
                joined.push_str(&pair[1]);
                if let Some(id) = self.vocab.id(&joined) {
                    let score = scores[id as usize];
                    if best.is_none_or(|(b, _)| score > b) {
                        best = Some((score, i));
                    }
                }
            }
            let Some((_, i)) = best else { break };
            let right = symbols.remove(i + 1);
            symbols[i].push_str(&right);
        }
        for symbol in symbols {
            match self.vocab.id(&symbol) {
                Some(id) => out.push(id),
                None => {
                    for b in symbol.bytes() {
                        out.extend(self.vocab.id(&format!("<0x{b:02X}>")));
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
                    let pair = (self.vocab.id(&w[0])?, self.vocab.id(&w[1])?);
                    self.merges.rank(pair.0, pair.1).map(|r| (r, i))
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
            let Some(t) = self.vocab.get(id) else {
                continue;
            };
            if self.special_ids[id as usize] {
                bytes.extend_from_slice(t.as_bytes());
            } else if self.spm_scores.is_some() {
                // `<0xXX>` byte tokens, else the text with `▁` for spaces
                let byte = t
                    .strip_prefix("<0x")
                    .and_then(|h| h.strip_suffix('>'))
                    .filter(|h| h.len() == 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match byte {
                    Some(b) => bytes.push(b),
                    None => bytes.extend_from_slice(t.replace('\u{2581}', " ").as_bytes()),
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_table_keeps_the_first_rank_of_a_pair_and_skips_unknown_texts() {
        let merges = [
            Some((5, 7)),
            None,
            Some((7, 5)),
            Some((5, 7)),
            Some((0, 0)),
            Some((2_097_151, 1)),
        ];
        let t = MergeTable::new(merges.into_iter()).unwrap();
        assert_eq!(t.rank(5, 7), Some(0));
        assert_eq!(t.rank(7, 5), Some(2));
        assert_eq!(t.rank(0, 0), Some(4));
        assert_eq!(t.rank(2_097_151, 1), Some(5));
        assert_eq!(t.rank(5, 5), None);
        assert_eq!(t.rank(1, 2_097_151), None);
        assert_eq!(t.rank(u32::MAX, 0), None);
        // six merges, one of unknown texts, one repeated pair
        assert_eq!(t.packed.len(), 4);
        // ids past the packed width are an error, not a wrong merge
        assert!(MergeTable::new([Some((2_097_152, 0))].into_iter()).is_err());
    }

    /// A hand-made SentencePiece vocabulary: merges by score, leftmost on ties, spaces as
    /// `▁`, byte fallback for characters that are no token, and the way back.
    #[test]
    fn sentencepiece_merges_by_score_with_byte_fallback() {
        use qrepack::gguf::{GgufValue, GgufValueType, GgufWriter};
        // (text, score, type): 1 normal, 2 unknown, 3 control, 6 byte
        let vocab = [
            ("<unk>", 0.0, 2),
            ("<bos>", 0.0, 3),
            ("<eos>", 0.0, 3),
            ("\u{2581}", -3.0, 1),
            ("a", -4.0, 1),
            ("b", -4.0, 1),
            ("ab", -1.0, 1),
            ("\u{2581}a", -2.0, 1),
            ("\u{2581}ab", -0.5, 1),
            ("<0x21>", 0.0, 6),
            ("<0xC3>", 0.0, 6),
            ("<0xA9>", 0.0, 6),
        ];
        let array = |ty, items: Vec<GgufValue>| GgufValue::Array(ty, items);
        let mut w = GgufWriter::new();
        let mut kv = |k: &str, v| w.add_kv(k, v).unwrap();
        kv("tokenizer.ggml.model", GgufValue::String("llama".into()));
        let texts = vocab
            .iter()
            .map(|v| GgufValue::String(v.0.into()))
            .collect();
        kv("tokenizer.ggml.tokens", array(GgufValueType::String, texts));
        let scores = vocab.iter().map(|v| GgufValue::F32(v.1)).collect();
        kv("tokenizer.ggml.scores", array(GgufValueType::F32, scores));
        let types = vocab.iter().map(|v| GgufValue::I32(v.2)).collect();
        kv(
            "tokenizer.ggml.token_type",
            array(GgufValueType::I32, types),
        );
        kv("tokenizer.ggml.bos_token_id", GgufValue::U32(1));
        kv("tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
        kv("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false));
        let g = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        let t = Tokenizer::from_gguf(&g).unwrap();
        // a b ▁ a b: "ab" (-1) at 0, then "ab" at 2, then "▁ab" (-0.5); "!" and "é" as bytes
        let ids = t.encode("ab ab!\u{e9}");
        assert_eq!(ids, vec![1, 6, 8, 9, 10, 11]);
        assert_eq!(t.decode(&ids), "<bos>ab ab!\u{e9}");
        // a special token in the text splits it
        assert_eq!(t.encode("a<eos>b"), vec![1, 4, 2, 5]);
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
