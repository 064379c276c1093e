//! The chat templates of the model families the decoder runs, recognized by the special tokens
//! of the vocabulary: one user turn and the opening of the assistant's, as the families' own
//! templates write them (the beginning-of-sequence token is left to the tokenizer, which adds
//! it when the file asks).

use crate::Tokenizer;

/// A family's chat format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChatTemplate {
    /// `<|im_start|>role\n...<|im_end|>` (Qwen 2/2.5/3, SmolLM2).
    ChatMl,
    /// `<start_of_turn>role\n...<end_of_turn>` (Gemma).
    Gemma,
    /// `<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>` (Llama 3.x).
    Llama3,
    /// OpenAI's harmony: `<|start|>role<|message|>...<|end|>` (gpt-oss).
    Harmony,
}

impl ChatTemplate {
    /// The template whose special tokens the vocabulary has, if any.
    pub fn detect(tok: &Tokenizer) -> Option<ChatTemplate> {
        let has = |t: &str| tok.token_id(t).is_some();
        if has("<|start_header_id|>") && has("<|eot_id|>") {
            Some(ChatTemplate::Llama3)
        } else if has("<|start|>") && has("<|message|>") {
            Some(ChatTemplate::Harmony)
        } else if has("<|im_start|>") {
            Some(ChatTemplate::ChatMl)
        } else if has("<start_of_turn>") {
            Some(ChatTemplate::Gemma)
        } else {
            None
        }
    }

    /// `user`'s message as one turn, followed by the opening of the assistant's.
    pub fn prompt(self, user: &str) -> String {
        match self {
            ChatTemplate::ChatMl => {
                format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
            }
            ChatTemplate::Gemma => {
                format!("<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n")
            }
            ChatTemplate::Llama3 => format!(
                "<|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|>\
                 <|start_header_id|>assistant<|end_header_id|>\n\n"
            ),
            ChatTemplate::Harmony => {
                format!("<|start|>user<|message|>{user}<|end|><|start|>assistant")
            }
        }
    }

    /// The token that ends the assistant's turn (besides the end-of-sequence token).
    pub fn end_of_turn(self) -> &'static str {
        match self {
            ChatTemplate::ChatMl => "<|im_end|>",
            ChatTemplate::Gemma => "<end_of_turn>",
            ChatTemplate::Llama3 => "<|eot_id|>",
            // the final answer ends with <|return|>; <|end|> closes the analysis before it
            ChatTemplate::Harmony => "<|return|>",
        }
    }
}
