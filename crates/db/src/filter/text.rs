//! Full-text indexes: how a `text` payload index cuts strings into tokens, and what `match`
//! `text`, `text_any` and `phrase` mean on a field that has one (Qdrant's semantics):
//! - `text`: every token of the query is among the value's tokens;
//! - `text_any`: at least one is;
//! - `phrase`: the query's tokens appear in the value one after another, in order (the
//!   index must be created with `phrase_matching`);
//! - a query left with no tokens (empty, or only stopwords) matches nothing.
//!
//! Without a text index the same conditions read the raw strings (`eval.rs`): `text` and
//! `phrase` a substring, `text_any` any whitespace-separated word of the query as one.
//!
//! Tokenizers: `word` (split at every character that is not alphanumeric, the default),
//! `whitespace`, `prefix` (words, each indexed by all its prefixes from `min_token_len`
//! on; a query word matches the words it begins). Tokens are lowercased unless
//! `lowercase: false`; stopwords (`"english"`, or `{"languages": [...], "custom": [...]}`)
//! and tokens shorter than `min_token_len` or longer than `max_token_len` (characters) are
//! dropped. Stemming, ASCII folding and the multilingual tokenizer are refused, not ignored.

use std::collections::HashSet;

use serde_json::Value;

use super::FilterError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    Word,
    Whitespace,
    Prefix,
}

/// A text index's options, read from Qdrant's `field_schema` object.
#[derive(Clone, Debug, PartialEq)]
pub struct TextIndexParams {
    pub tokenizer: TokenizerKind,
    pub lowercase: bool,
    pub min_token_len: Option<usize>,
    pub max_token_len: Option<usize>,
    /// As compared with tokens: lowercased when the index lowercases.
    pub stopwords: HashSet<String>,
    pub phrase_matching: bool,
}

impl Default for TextIndexParams {
    fn default() -> Self {
        Self {
            tokenizer: TokenizerKind::Word,
            lowercase: true,
            min_token_len: None,
            max_token_len: None,
            stopwords: HashSet::new(),
            phrase_matching: false,
        }
    }
}

fn bad(message: impl Into<String>) -> FilterError {
    FilterError(message.into())
}

impl TextIndexParams {
    /// Reads a `field_schema` object of `"type": "text"` (`None`: the defaults).
    pub fn from_json(schema: Option<&Value>) -> Result<Self, FilterError> {
        let mut p = Self::default();
        let Some(schema) = schema.filter(|s| s.is_object()) else {
            return Ok(p);
        };
        let field = |name: &str| schema.get(name).filter(|v| !v.is_null());
        match field("tokenizer").map(|t| t.as_str()) {
            None | Some(Some("word")) => {}
            Some(Some("whitespace")) => p.tokenizer = TokenizerKind::Whitespace,
            Some(Some("prefix")) => p.tokenizer = TokenizerKind::Prefix,
            Some(Some("multilingual")) => {
                return Err(bad(
                    "the multilingual tokenizer is not supported: use word, whitespace or prefix",
                ))
            }
            Some(_) => {
                return Err(bad(
                    "tokenizer must be one of \"word\", \"whitespace\", \"prefix\"",
                ))
            }
        }
        if let Some(v) = field("lowercase") {
            p.lowercase = v
                .as_bool()
                .ok_or_else(|| bad("lowercase must be true or false"))?;
        }
        if let Some(v) = field("phrase_matching") {
            p.phrase_matching = v
                .as_bool()
                .ok_or_else(|| bad("phrase_matching must be true or false"))?;
        }
        for (name, slot) in [
            ("min_token_len", &mut p.min_token_len),
            ("max_token_len", &mut p.max_token_len),
        ] {
            if let Some(v) = field(name) {
                let n = v
                    .as_u64()
                    .ok_or_else(|| bad(format!("{name} must be a non-negative integer")))?;
                *slot = Some(n as usize);
            }
        }
        for refused in ["stemmer", "ascii_folding"] {
            if field(refused).is_some_and(|v| v != &Value::Bool(false)) {
                return Err(bad(format!("{refused} is not supported in text indexes")));
            }
        }
        let lowercase = p.lowercase;
        let mut add = |word: &str| {
            p.stopwords.insert(match lowercase {
                true => word.to_lowercase(),
                false => word.to_string(),
            });
        };
        match field("stopwords") {
            None => {}
            Some(language @ Value::String(_)) => {
                language_stopwords(language)?.iter().for_each(|w| add(w))
            }
            Some(Value::Object(set)) => {
                for (name, list) in set {
                    let items = match list {
                        Value::Null => continue,
                        Value::Array(items) => items,
                        _ => return Err(bad(format!("stopwords.{name} must be a list"))),
                    };
                    for item in items {
                        match name.as_str() {
                            "languages" => language_stopwords(item)?.iter().for_each(|w| add(w)),
                            "custom" => add(item
                                .as_str()
                                .ok_or_else(|| bad("custom stopwords are strings"))?),
                            _ => return Err(bad(format!("unknown stopwords field {name:?}"))),
                        }
                    }
                }
            }
            Some(_) => return Err(bad("stopwords must be a language or an object")),
        }
        Ok(p)
    }

    /// The token a word of text becomes, if it is kept (`check_max`: drop words longer than
    /// `max_token_len`; the prefix tokenizer cuts them instead).
    fn process(&self, word: &str, check_max: bool) -> Option<String> {
        if word.is_empty() {
            return None;
        }
        let token = match self.lowercase {
            true => word.to_lowercase(),
            false => word.to_string(),
        };
        let chars = token.chars().count();
        let too_short = self.min_token_len.is_some_and(|m| chars < m);
        let too_long = check_max && self.max_token_len.is_some_and(|m| chars > m);
        (!self.stopwords.contains(&token) && !too_short && !too_long).then_some(token)
    }

    fn words<'a>(&self, text: &'a str) -> Box<dyn Iterator<Item = &'a str> + 'a> {
        match self.tokenizer {
            TokenizerKind::Whitespace => Box::new(text.split_whitespace()),
            TokenizerKind::Word | TokenizerKind::Prefix => {
                Box::new(text.split(|c: char| !c.is_alphanumeric()))
            }
        }
    }

    /// The tokens a stored value is indexed by (the prefix tokenizer: every prefix of each
    /// word, from `min_token_len` characters to `max_token_len`).
    pub fn document_tokens(&self, text: &str) -> HashSet<String> {
        let mut out = HashSet::new();
        for word in self.words(text) {
            if self.tokenizer != TokenizerKind::Prefix {
                out.extend(self.process(word, true));
                continue;
            }
            let Some(token) = self.process(word, false) else {
                continue;
            };
            let ends: Vec<usize> = token
                .char_indices()
                .map(|(i, _)| i)
                .skip(1)
                .chain([token.len()])
                .collect();
            let first = self.min_token_len.unwrap_or(1).max(1);
            let last = self.max_token_len.unwrap_or(usize::MAX);
            for (n, &end) in ends.iter().enumerate().map(|(i, e)| (i + 1, e)) {
                if n >= first && n <= last {
                    out.insert(token[..end].to_string());
                }
            }
        }
        out
    }

    /// The tokens of a query (the prefix tokenizer: whole words, stopwords kept as Qdrant
    /// keeps them there, cut at `max_token_len`).
    pub fn query_tokens(&self, text: &str) -> Vec<String> {
        if self.tokenizer != TokenizerKind::Prefix {
            return self.sequence(text);
        }
        self.words(text)
            .filter(|word| !word.is_empty())
            .filter_map(|word| {
                let mut token = match self.lowercase {
                    true => word.to_lowercase(),
                    false => word.to_string(),
                };
                if self
                    .min_token_len
                    .is_some_and(|m| token.chars().count() < m)
                {
                    return None;
                }
                if let Some((cut, _)) = self.max_token_len.and_then(|m| token.char_indices().nth(m))
                {
                    token.truncate(cut);
                }
                Some(token)
            })
            .collect()
    }

    /// A value's (or a phrase's) tokens in order.
    pub(crate) fn sequence(&self, text: &str) -> Vec<String> {
        self.words(text)
            .filter_map(|word| self.process(word, true))
            .collect()
    }

    /// Whether the stored string `value` passes `kind` with query `query`.
    pub fn matches(&self, kind: TextMatch, query: &str, value: &str) -> bool {
        let wanted = match kind {
            TextMatch::Phrase => self.sequence(query),
            _ => self.query_tokens(query),
        };
        if wanted.is_empty() {
            return false;
        }
        match kind {
            TextMatch::All => {
                let have = self.document_tokens(value);
                wanted.iter().all(|t| have.contains(t))
            }
            TextMatch::Any => {
                let have = self.document_tokens(value);
                wanted.iter().any(|t| have.contains(t))
            }
            TextMatch::Phrase => self
                .sequence(value)
                .windows(wanted.len())
                .any(|w| w == wanted.as_slice()),
        }
    }
}

/// The stopwords of the language named by `name`.
fn language_stopwords(name: &Value) -> Result<&'static [&'static str], FilterError> {
    match name.as_str() {
        Some("english") => Ok(ENGLISH_STOPWORDS),
        Some(other) => Err(bad(format!(
            "stopwords for {other:?} are not bundled (only \"english\"): give them as \
             {{\"custom\": [...]}}"
        ))),
        None => Err(bad("a stopword language is a string")),
    }
}

/// The three token matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextMatch {
    /// `match.text`
    All,
    /// `match.text_any`
    Any,
    /// `match.phrase`
    Phrase,
}

/// Common English function words, dropped by `"stopwords": "english"`.
const ENGLISH_STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(schema: Value) -> TextIndexParams {
        TextIndexParams::from_json(Some(&schema)).unwrap()
    }

    #[test]
    fn word_tokens_lowercase_and_drop_stopwords() {
        let p = params(json!({"type": "text", "stopwords": "english"}));
        assert!(p.matches(TextMatch::All, "ROBOT", "Little Lost Robot"));
        assert!(!p.matches(TextMatch::All, "robot star", "Little Lost Robot"));
        assert!(p.matches(TextMatch::Any, "robot of the star", "The Portable Star"));
        // Only stopwords: nothing to look for, nothing matches.
        assert!(!p.matches(TextMatch::Any, "of the", "The Portable Star"));
        assert!(!p.matches(TextMatch::All, "", "anything"));
        assert_eq!(p.query_tokens("Breeds There a Man...?"), ["breeds", "man"]);
    }

    #[test]
    fn prefix_tokens_match_the_words_a_query_begins() {
        let p = params(json!({"type": "text", "tokenizer": "prefix"}));
        assert!(p.matches(TextMatch::All, "ROBO", "Robot AL-76 Goes Astray"));
        assert!(p.matches(TextMatch::All, "ro go", "Robot AL-76 Goes Astray"));
        assert!(!p.matches(TextMatch::All, "obot", "Robot Dreams"));
        let short = params(
            json!({"type": "text", "tokenizer": "prefix", "min_token_len": 2, "max_token_len": 3}),
        );
        assert_eq!(
            short.document_tokens("Robot"),
            ["ro", "rob"].iter().map(|s| s.to_string()).collect()
        );
        assert!(
            short.matches(TextMatch::All, "robotics", "Robot"),
            "cut to rob"
        );
    }

    #[test]
    fn phrases_need_the_tokens_in_order() {
        let p = params(json!({"type": "text", "phrase_matching": true}));
        let doc = "writing tests is very very very important";
        assert!(p.matches(TextMatch::Phrase, "very very very", doc));
        assert!(!p.matches(TextMatch::Phrase, "very very very very", doc));
        assert!(p.matches(TextMatch::Phrase, "Tests is", doc));
        assert!(!p.matches(TextMatch::Phrase, "is tests", doc));
        assert!(!p.matches(TextMatch::Phrase, "", doc));
    }

    #[test]
    fn custom_stopwords_keep_their_case_without_lowercasing() {
        let p = params(json!({"type": "text", "lowercase": false,
                              "stopwords": {"custom": ["the", "The", "LAZY"]}}));
        let doc = "The quick brown fox jumps over the lazy dog";
        assert!(p.matches(TextMatch::All, "lazy", doc));
        assert!(!p.matches(TextMatch::All, "The", doc));
        assert!(!p.matches(TextMatch::All, "LAZY", doc));
        assert!(!p.matches(TextMatch::All, "Lazy", doc), "case is kept");
    }

    #[test]
    fn what_is_not_supported_is_refused() {
        for schema in [
            json!({"type": "text", "tokenizer": "multilingual"}),
            json!({"type": "text", "stemmer": {"type": "snowball", "language": "english"}}),
            json!({"type": "text", "stopwords": "klingon"}),
            json!({"type": "text", "min_token_len": -1}),
            json!({"type": "text", "lowercase": "yes"}),
        ] {
            assert!(
                TextIndexParams::from_json(Some(&schema)).is_err(),
                "{schema}"
            );
        }
        assert_eq!(
            TextIndexParams::from_json(None).unwrap(),
            TextIndexParams::default()
        );
    }
}
