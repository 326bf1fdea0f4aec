//! BPE pre-tokenization: split text into words with the regex list of the
//! vocabulary's pre-tokenizer type, then write each word's bytes with GPT-2's
//! byte-to-unicode map.
//!
//! The regexes are applied one after the other; each one splits every piece
//! the previous ones produced, and the text between matches stays a piece of
//! its own. Two regexes (GPT-2's and LLaMA 3's) have hand-written splitters,
//! exactly as llama.cpp has; the others run through a backtracking regex
//! engine on a rewritten text:
//!
//! - when the regex uses `\p{N}`, `\p{L}`, `\p{P}`, `\p{M}` or `\p{S}`, every
//!   non-ASCII code point is replaced by one placeholder per category
//!   (U+00D1 number, U+00D2 letter, U+00D3 punctuation, U+00D4 mark, U+00D5
//!   symbol, U+00D0 anything else, U+000B whitespace) and each category in
//!   the regex by its placeholder plus its ASCII members;
//! - otherwise the text is used as is, non-ASCII whitespace replaced by
//!   U+000B.
//!
//! This reproduces llama.cpp's splits, including their deviations from a
//! fully Unicode-aware regex engine.

use fancy_regex::Regex;

use super::error::{Result, VocabError};
use super::types::PreType;
use super::unicode::{
    self, cpts_from_utf8, Cpt, Flags, CAT_LETTER, CAT_MARK, CAT_NUMBER, CAT_PUNCTUATION, CAT_SYMBOL,
};

/// GPT-2's regex, split by [`split_gpt2`].
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// LLaMA 3's regex (case-insensitive contractions spelled out), split by
/// [`split_llama3`].
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// LLaMA 3's regex as written in its `tokenizer.json`; same splitter.
const LLAMA3_ORIGINAL: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 2's regex: LLaMA 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The letters of the DeepSeek LLM pre-tokenizer.
const DEEPSEEK_LETTERS: &str = "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+";

/// CJK ideographs and Hangul of the DeepSeek pre-tokenizers.
const DEEPSEEK_CJK: &str = "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+";

/// The BLOOM-family regex.
const BLOOM: &str = " ?[^(\\s|.,!?\u{2026}\u{3002}\u{FF0C}\u{3001}\u{964}\u{6D4}\u{60C})]+";

/// The regexes of a pre-tokenizer type, in the order they are applied.
pub(crate) fn regexes(pre: PreType) -> Vec<&'static str> {
    use PreType::*;
    match pre {
        Llama3 | Dbrx | Smaug | Chatglm4 => vec![LLAMA3],
        DeepseekLlm => vec![
            "[\r\n]",
            DEEPSEEK_LETTERS,
            "\\s?[!-/:-~\u{FF01}-\u{FF0F}\u{FF1A}-\u{FF5E}\u{2018}-\u{201F}\u{3000}-\u{3002}]+",
            "\\s+$",
            DEEPSEEK_CJK,
            "\\p{N}+",
        ],
        Deepseek3Llm => vec![
            "\\p{N}{1,3}",
            "[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
        ],
        DeepseekCoder => vec!["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", DEEPSEEK_CJK, "\\p{N}"],
        Falcon => vec!["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"],
        Starcoder | Refact | CommandR | Smollm | Codeshell | Exaone | Minerva => vec!["\\p{N}", GPT2],
        Gpt2 | Mpt | Olmo | Jais => vec![GPT2],
        Stablelm2 | Qwen2 => vec![QWEN2],
        Poro | Bloom | Gpt3Finnish => vec![BLOOM],
        Viking => vec![BLOOM, "\\p{N}"],
        Tekken => vec![
            "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        Chameleon => vec![
            "<sentinel:[0-9]+>",
            "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
            "([\\t\\n]|    |  )",
            "\\p{N}",
            "[\\p{P}!-/:-@\\[-`{-~]",
            GPT2,
        ],
        Default => vec!["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
        Jais2 => vec![
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
        ],
        Spark25 => vec![
            "\\p{N}{1,3}",
            "[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
            "\\p{N}",
        ],
        Youtu => vec![
            "[\u{AC00}-\u{D7A3}\u{3131}-\u{318E}]+|[\u{FF01}\u{2026}\u{201C}\u{201D}\u{2018}\u{2019}\u{2014}\u{FF1A}\u{FF1B}\u{FF0C}\u{3001}-\u{303F}\u{FE30}-\u{FE4F}]+|[\u{3105}-\u{312F}]+|[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+",
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        Gpt4o => vec![
            "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        GraniteEmbMulti => vec![
            "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        Bailingmoe => vec![
            "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
        ],
        SeedCoder => vec![
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        Ufakzeka => vec![
            "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        Laguna => vec![
            "[^\\n]+|[\\n]+",
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        ExaoneMoe => vec![
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
        ],
        Minicpm5 => vec![
            "\\p{N}{1,3}",
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        Qwen35 => vec![
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
    }
}

/// The categories a regex may name, with their placeholder and the ASCII
/// members that stay themselves in the rewritten text.
const CATEGORIES: [(&str, char, &str); 10] = [
    ("\\p{N}", '\u{D1}', "0-9"),
    ("\\p{L}", '\u{D2}', "A-Za-z"),
    ("\\p{P}", '\u{D3}', "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"),
    ("\\p{M}", '\u{D4}', ""),
    ("\\p{S}", '\u{D5}', "\\$\\+<->\\^`\\|"),
    ("\\p{Lu}", '\u{D2}', "A-Za-z"),
    ("\\p{Ll}", '\u{D2}', "A-Za-z"),
    ("\\p{Lt}", '\u{D2}', "A-Za-z"),
    ("\\p{Lm}", '\u{D2}', "A-Za-z"),
    ("\\p{Lo}", '\u{D2}', "A-Za-z"),
];

/// Placeholder of a non-ASCII code point in the rewritten text.
fn collapse(cpt: Cpt, f: Flags) -> char {
    if cpt < 0x80 {
        return unicode::to_char(cpt);
    }
    if f.whitespace {
        return '\u{0B}';
    }
    match f.category {
        CAT_NUMBER => '\u{D1}',
        CAT_LETTER => '\u{D2}',
        CAT_PUNCTUATION => '\u{D3}',
        CAT_MARK => '\u{D4}',
        CAT_SYMBOL => '\u{D5}',
        _ => '\u{D0}',
    }
}

fn uses_categories(expr: &str) -> bool {
    CATEGORIES.iter().any(|(name, _, _)| expr.contains(name))
}

/// Rewrites the categories of `expr` into placeholder classes, keeping
/// track of bracket expressions so that no class gets nested.
fn collapse_regex(expr: &str) -> String {
    let bytes = expr.as_bytes();
    let mut out = String::with_capacity(expr.len() * 2);
    let mut inside = false;
    let mut i = 0;
    while i < expr.len() {
        let escaped = i > 0 && bytes[i - 1] == b'\\';
        if bytes[i] == b'[' && !escaped {
            out.push('[');
            inside = true;
            i += 1;
            continue;
        }
        if inside && bytes[i] == b']' && !escaped {
            out.push(']');
            inside = false;
            i += 1;
            continue;
        }
        if let Some((name, placeholder, ascii)) = CATEGORIES
            .iter()
            .find(|(name, _, _)| expr[i..].starts_with(name))
        {
            if !inside {
                out.push('[');
            }
            out.push_str(&format!("\\x{{{:X}}}", *placeholder as u32));
            out.push_str(ascii);
            if !inside {
                out.push(']');
            }
            i += name.len();
            continue;
        }
        // Copy one whole character (the regex may hold non-ASCII literals).
        let ch_len = expr[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&expr[i..i + ch_len]);
        i += ch_len;
    }
    out
}

/// One splitting step.
#[derive(Clone)]
enum Splitter {
    /// GPT-2's regex, hand-written.
    Gpt2,
    /// LLaMA 3's regex, hand-written.
    Llama3,
    /// Any other regex, on the rewritten text.
    Regex {
        /// The compiled (possibly category-rewritten) regex.
        re: Regex,
        /// Whether it runs on the category-collapsed text.
        collapsed: bool,
    },
}

/// A compiled pre-tokenizer.
#[derive(Clone)]
pub(crate) struct PreTokenizer {
    splitters: Vec<Splitter>,
}

/// Backtracking budget per regex search; far above what any real text needs,
/// it only guards against pathological input.
const BACKTRACK_LIMIT: usize = 10_000_000;

impl PreTokenizer {
    /// Compiles the regex list of `pre`.
    pub(crate) fn new(pre: PreType) -> Result<PreTokenizer> {
        PreTokenizer::from_regexes(&regexes(pre))
    }

    /// Compiles an explicit regex list.
    pub(crate) fn from_regexes(exprs: &[&str]) -> Result<PreTokenizer> {
        let mut splitters = Vec::with_capacity(exprs.len());
        for &expr in exprs {
            let splitter = if expr == GPT2 {
                Splitter::Gpt2
            } else if expr == LLAMA3 || expr == LLAMA3_ORIGINAL {
                Splitter::Llama3
            } else {
                let collapsed = uses_categories(expr);
                let pattern = if collapsed {
                    collapse_regex(expr)
                } else {
                    expr.to_string()
                };
                let re = fancy_regex::RegexBuilder::new(&pattern)
                    .backtrack_limit(BACKTRACK_LIMIT)
                    .build()
                    .map_err(|e| VocabError::Regex {
                        regex: expr.to_string(),
                        message: e.to_string(),
                    })?;
                Splitter::Regex { re, collapsed }
            };
            splitters.push(splitter);
        }
        Ok(PreTokenizer { splitters })
    }

    /// Splits `text` into words, each written with the byte-to-unicode map
    /// (as UTF-8 bytes).
    pub(crate) fn split(&self, text: &[u8]) -> Vec<Vec<u8>> {
        let cpts = cpts_from_utf8(text);
        if cpts.is_empty() {
            return Vec::new();
        }
        let flags: Vec<Flags> = cpts.iter().map(|&c| unicode::flags(c)).collect();
        let mut offsets = vec![cpts.len()];
        let mut collapsed: Option<Vec<char>> = None;
        let mut wide: Option<Vec<char>> = None;
        for splitter in &self.splitters {
            let next = match splitter {
                Splitter::Gpt2 => split_gpt2(&cpts, &flags, &offsets),
                Splitter::Llama3 => split_llama3(&cpts, &flags, &offsets),
                Splitter::Regex {
                    re,
                    collapsed: true,
                } => {
                    let chars = collapsed.get_or_insert_with(|| {
                        cpts.iter()
                            .zip(&flags)
                            .map(|(&c, &f)| collapse(c, f))
                            .collect()
                    });
                    split_regex(re, chars, &offsets)
                }
                Splitter::Regex {
                    re,
                    collapsed: false,
                } => {
                    let chars = wide.get_or_insert_with(|| {
                        cpts.iter()
                            .zip(&flags)
                            .map(|(&c, &f)| {
                                if c > 0x7F && f.whitespace {
                                    '\u{0B}'
                                } else {
                                    unicode::to_char(c)
                                }
                            })
                            .collect()
                    });
                    split_regex(re, chars, &offsets)
                }
            };
            offsets = next;
        }
        let mut words = Vec::with_capacity(offsets.len());
        let mut start = 0;
        for len in offsets {
            let mut utf8 = Vec::with_capacity(len * 2);
            for &c in &cpts[start..start + len] {
                unicode::push_utf8(&mut utf8, c);
            }
            let mut word = Vec::with_capacity(utf8.len() * 2);
            for b in utf8 {
                unicode::push_utf8(&mut word, unicode::byte_to_cpt(b));
            }
            words.push(word);
            start += len;
        }
        words
    }
}

/// Collects piece lengths for one piece `[ini, end)` of the text.
struct Pieces<'a> {
    out: &'a mut Vec<usize>,
    prev_end: usize,
}

impl Pieces<'_> {
    /// Ends the current word at `end` (nothing for an empty word).
    fn add(&mut self, end: usize) {
        let len = end - self.prev_end;
        if len > 0 {
            self.out.push(len);
        }
        self.prev_end = end;
    }
}

/// The length of the contraction `'s|'t|'re|'ve|'m|'ll|'d` that `cpts`
/// starts with, its letters compared through `fold` (llama3 matches them
/// case-insensitively); 0 when it starts with none.
fn contraction_len(cpts: &[Cpt], fold: impl Fn(Cpt) -> Cpt) -> usize {
    if cpts.len() < 2 || cpts[0] != '\'' as Cpt {
        return 0;
    }
    let n1 = fold(cpts[1]);
    if [b's', b't', b'm', b'd'].iter().any(|&x| n1 == x as Cpt) {
        return 2;
    }
    if cpts.len() > 2 {
        let n2 = fold(cpts[2]);
        let pair = |a: u8, b: u8| n1 == a as Cpt && n2 == b as Cpt;
        if pair(b'r', b'e') || pair(b'v', b'e') || pair(b'l', b'l') {
            return 3;
        }
    }
    0
}

/// Where a word of `n_ws` whitespace code points at `pos` ends:
/// `\s+(?!\S)` leaves the last one to the next word when more text
/// follows (`more`); a lone code point the patterns leave unmatched is a
/// word of its own.
fn whitespace_end(pos: usize, n_ws: usize, more: bool) -> usize {
    if n_ws > 1 && more {
        pos + n_ws - 1
    } else if n_ws > 0 {
        pos + n_ws
    } else {
        pos + 1
    }
}

/// One chunk of the text as the hand-written splitters read it: its code
/// points and flags, with nothing past its end.
struct Chunk<'a> {
    cpts: &'a [Cpt],
    flags: &'a [Flags],
    end: usize,
}

impl Chunk<'_> {
    /// The code point at `p`; `None` past the end.
    fn cpt(&self, p: usize) -> Option<Cpt> {
        (p < self.end).then(|| self.cpts[p])
    }

    /// The flags at `p`; none past the end.
    fn fl(&self, p: usize) -> Flags {
        if p < self.end {
            self.flags[p]
        } else {
            Flags::NONE
        }
    }
}

/// A hand-written splitter: each chunk that `offsets` cut is read from its
/// start, a contraction (letters compared through `fold`) being a word
/// wherever one begins, and otherwise `word(chunk, pos, pieces)` giving
/// the end of the word at `pos` (it may end shorter words on the way).
/// Returns the word lengths.
fn split_words(
    cpts: &[Cpt],
    flags: &[Flags],
    offsets: &[usize],
    fold: impl Fn(Cpt) -> Cpt + Copy,
    word: impl Fn(&Chunk, usize, &mut Pieces) -> usize,
) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    for &len in offsets {
        let end = start + len;
        let chunk = Chunk { cpts, flags, end };
        let mut pieces = Pieces {
            out: &mut out,
            prev_end: start,
        };
        let mut pos = start;
        while pos < end {
            pos = match contraction_len(&cpts[pos..end], fold) {
                0 => word(&chunk, pos, &mut pieces),
                n => pos + n,
            };
            pieces.add(pos);
        }
        start = end;
    }
    out
}

/// A code point that is neither whitespace, letter nor number (and not
/// past the end).
fn is_other(f: Flags) -> bool {
    !(f.whitespace || f.is_letter() || f.is_number()) && f.is_some()
}

/// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
/// (a whitespace the regex leaves unmatched becomes a word of its own).
fn split_gpt2(cpts: &[Cpt], flags: &[Flags], offsets: &[usize]) -> Vec<usize> {
    split_words(
        cpts,
        flags,
        offsets,
        |c| c,
        |ch, mut pos, _| {
            let (c, f) = (cpts[pos], flags[pos]);
            let space = c == ' ' as Cpt;
            let f2 = if space { ch.fl(pos + 1) } else { f };
            if f2.is_letter() || f2.is_number() || is_other(f2) {
                let same = |g: Flags| {
                    if f2.is_letter() {
                        g.is_letter()
                    } else if f2.is_number() {
                        g.is_number()
                    } else {
                        is_other(g)
                    }
                };
                pos += space as usize;
                while same(ch.fl(pos)) {
                    pos += 1;
                }
                return pos;
            }
            let mut n_ws = 0;
            while ch.fl(pos + n_ws).whitespace {
                n_ws += 1;
            }
            whitespace_end(pos, n_ws, ch.cpt(pos + n_ws).is_some())
        },
    )
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
/// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
fn split_llama3(cpts: &[Cpt], flags: &[Flags], offsets: &[usize]) -> Vec<usize> {
    let is_cr_lf = |c: Option<Cpt>| c == Some('\r' as Cpt) || c == Some('\n' as Cpt);
    split_words(
        cpts,
        flags,
        offsets,
        unicode::to_lower,
        |ch, mut pos, pieces| {
            let (c, f) = (cpts[pos], flags[pos]);
            // [^\r\n\p{L}\p{N}]?\p{L}+
            if !(is_cr_lf(Some(c)) || f.is_number())
                && (f.is_letter() || ch.fl(pos + 1).is_letter())
            {
                pos += 1;
                while ch.fl(pos).is_letter() {
                    pos += 1;
                }
                return pos;
            }
            // \p{N}{1,3}
            if f.is_number() {
                let mut group = pos;
                while ch.fl(pos).is_number() {
                    pos += 1;
                    if pos - group >= 3 {
                        pieces.add(pos);
                        group = pos;
                    }
                }
                return pos;
            }
            // ' ?[^\s\p{L}\p{N}]+[\r\n]*' (the current code point always
            // exists, so a lone trailing space is taken here too)
            let space = c == ' ' as Cpt;
            let f2 = if space { ch.fl(pos + 1) } else { f };
            if !(f2.whitespace || f2.is_letter() || f2.is_number()) {
                pos += space as usize;
                while is_other(ch.fl(pos)) {
                    pos += 1;
                }
                while is_cr_lf(ch.cpt(pos)) {
                    pos += 1;
                }
                return pos;
            }
            let mut n_ws = 0;
            let mut last_cr_lf_end = None;
            while ch.fl(pos + n_ws).whitespace {
                if is_cr_lf(ch.cpt(pos + n_ws)) {
                    last_cr_lf_end = Some(pos + n_ws + 1);
                }
                n_ws += 1;
            }
            match last_cr_lf_end {
                // \s*[\r\n]+
                Some(e) => e,
                None => whitespace_end(pos, n_ws, ch.cpt(pos + n_ws).is_some()),
            }
        },
    )
}

/// Splits every piece with `re`; unmatched text between matches is a piece
/// too. Each piece is searched on its own (anchors and look-arounds see its
/// ends as the ends of the text).
fn split_regex(re: &Regex, chars: &[char], offsets: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    let mut subject = String::new();
    for &len in offsets {
        let piece = &chars[start..start + len];
        start += len;
        subject.clear();
        subject.extend(piece.iter());
        // Byte offset in `subject` -> char offset in `piece`.
        let mut byte_to_char = Vec::with_capacity(subject.len() + 1);
        for (i, ch) in piece.iter().enumerate() {
            for _ in 0..ch.len_utf8() {
                byte_to_char.push(i);
            }
        }
        byte_to_char.push(piece.len());
        let mut done = 0; // chars consumed
        for m in re.find_iter(&subject) {
            // A search that exceeds the backtracking budget ends the
            // splitting of this piece; the rest stays one word.
            let Ok(m) = m else { break };
            let (ms, me) = (byte_to_char[m.start()], byte_to_char[m.end()]);
            if ms == me {
                continue;
            }
            if ms > done {
                out.push(ms - done);
            }
            out.push(me - ms);
            done = me;
        }
        if done < len {
            out.push(len - done);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: PreType, text: &str) -> Vec<String> {
        let p = PreTokenizer::new(pre).unwrap();
        p.split(text.as_bytes())
            .into_iter()
            .map(|w| {
                // Undo the byte map to show the words as text.
                let bytes: Vec<u8> = cpts_from_utf8(&w)
                    .into_iter()
                    .map(|c| unicode::cpt_to_byte(c).unwrap())
                    .collect();
                String::from_utf8(bytes).unwrap()
            })
            .collect()
    }

    #[test]
    fn all_regexes_compile() {
        for (i, pre) in PreType::ALL.into_iter().enumerate() {
            // A variant missing from the list shifts the ones after it.
            assert_eq!(
                pre as usize, i,
                "PreType::ALL is missing a variant before {pre:?}"
            );
            PreTokenizer::new(pre).unwrap_or_else(|e| panic!("{pre:?}: {e}"));
        }
    }

    #[test]
    fn collapse_rewrites_categories() {
        assert_eq!(collapse_regex("\\p{N}+"), "[\\x{D1}0-9]+");
        assert_eq!(collapse_regex("[^\\s\\p{L}]"), "[^\\s\\x{D2}A-Za-z]");
        assert_eq!(collapse_regex("\\[\\p{M}"), "\\[[\\x{D4}]");
    }

    #[test]
    fn gpt2_words() {
        assert_eq!(words(PreType::Gpt2, "Hello world"), ["Hello", " world"]);
        assert_eq!(
            words(PreType::Gpt2, "I'm  fine!!\n"),
            ["I", "'m", " ", " fine", "!!", "\n"]
        );
        assert_eq!(words(PreType::Gpt2, "a\tb"), ["a", "\t", "b"]);
        assert_eq!(words(PreType::Gpt2, "x   "), ["x", "   "]);
        assert_eq!(words(PreType::Gpt2, "12 345"), ["12", " 345"]);
    }

    #[test]
    fn llama3_words() {
        assert_eq!(words(PreType::Llama3, "Hello world"), ["Hello", " world"]);
        assert_eq!(words(PreType::Llama3, "1234567"), ["123", "456", "7"]);
        assert_eq!(
            words(PreType::Llama3, "I'M ok\n\n  x"),
            ["I", "'M", " ok", "\n\n", " ", " x"]
        );
        assert_eq!(words(PreType::Llama3, "a ..\n"), ["a", " ..\n"]);
        assert_eq!(words(PreType::Llama3, "a "), ["a", " "]);
    }

    #[test]
    fn qwen2_regex_matches_llama3_but_digits() {
        assert_eq!(
            words(PreType::Qwen2, "I'M ok\n\n  x 12"),
            ["I", "'M", " ok", "\n\n", " ", " x", " ", "1", "2"]
        );
    }

    #[test]
    fn default_and_falcon() {
        // Punctuation first, then GPT-2, then digit runs and triples.
        assert_eq!(
            words(PreType::Default, "a, b 1234"),
            ["a", ",", " b", " ", "123", "4"]
        );
        assert_eq!(words(PreType::Falcon, "x=1234"), ["x", "=", "123", "4"]);
    }

    #[test]
    fn non_ascii_categories() {
        // 'é' is a letter, '€' a symbol, '٣' a number, U+3000 a space.
        assert_eq!(words(PreType::Gpt2, "café €5 ٣"), ["café", " €", "5", " ٣"]);
        assert_eq!(
            words(PreType::Starcoder, "x\u{3000}\u{3000}y"),
            ["x", "\u{3000}", "\u{3000}", "y"]
        );
        assert_eq!(
            words(PreType::DeepseekCoder, "né 12"),
            ["né", " ", "1", "2"]
        );
    }

    #[test]
    fn empty_and_odd_bytes() {
        assert!(words(PreType::Gpt2, "").is_empty());
        let p = PreTokenizer::new(PreType::Qwen2).unwrap();
        assert_eq!(p.split(&[0xFF, b'a']).len(), 1);
    }

    /// Splits of the newer pre-tokenizers, as a Unicode regex engine gives
    /// them for their regexes (these texts need no category collapsing).
    #[test]
    fn newer_pre_tokenizers_split_as_their_regexes() {
        use PreType::*;
        let cases: [(PreType, &str, &[&str]); 11] = [
            (
                Qwen35,
                "e\u{301}x 12 I'M",
                &["e\u{301}x", " ", "1", "2", " I", "'M"],
            ),
            (
                Qwen2,
                "e\u{301}x 12 I'M",
                &["e", "\u{301}x", " ", "1", "2", " I", "'M"],
            ),
            (
                Gpt4o,
                "HTTPServer getHTTPResponse I'M ok123456",
                &[
                    "HTTPServer",
                    " get",
                    "HTTPResponse",
                    " I'M",
                    " ok",
                    "123",
                    "456",
                ],
            ),
            (
                Jais2,
                "a                    b",
                &["a", "                ", "  ", " ", " b"],
            ),
            (
                SeedCoder,
                "x = 12;\n\ny",
                &["x", " =", " ", "1", "2", ";", "\n\n", "y"],
            ),
            (
                Bailingmoe,
                "it'S ok\n\n1 2",
                &["it", "'S", " ok", "\n\n", "1", " ", "2"],
            ),
            (ExaoneMoe, "new york city/x", &["new york city", "/x"]),
            (Laguna, "ab\n\ncd 12", &["ab", "\n\n", "cd", " ", "1", "2"]),
            (Minicpm5, "abc 12345 x", &["abc", " ", "123", "45", " x"]),
            (
                Youtu,
                "\u{d55c}\u{ad6d}\u{c5b4}ABCdef \u{4f60}\u{597d}",
                &[
                    "\u{d55c}\u{ad6d}\u{c5b4}",
                    "ABCdef",
                    " ",
                    "\u{4f60}\u{597d}",
                ],
            ),
            (
                Spark25,
                "ab 1234 \u{4f60}\u{597d}\n",
                &["ab", " ", "1", "2", "3", "4", " ", "\u{4f60}\u{597d}", "\n"],
            ),
        ];
        for (pre, text, want) in cases {
            assert_eq!(words(pre, text), want, "{pre:?} {text:?}");
        }
    }
}

#[cfg(test)]
mod agreement {
    use super::*;

    /// The regex engine on the collapsed text, bypassing the hand-written
    /// splitter chosen for `expr`.
    fn by_regex(expr: &str) -> PreTokenizer {
        let re = fancy_regex::Regex::new(&collapse_regex(expr)).unwrap();
        PreTokenizer {
            splitters: vec![Splitter::Regex {
                re,
                collapsed: true,
            }],
        }
    }

    /// The hand-written GPT-2 and LLaMA 3 splitters split exactly as the
    /// regexes they stand for, on text mixing every category they look at.
    #[test]
    fn custom_splitters_match_their_regexes() {
        let alphabet: Vec<char> =
            "aZé漢 \t\n\r\u{0B}\u{3000}\u{85}07٣.,!?'’-_$€😀\u{0301}sStTmMdDlLrReEvV\u{17F}\u{212A}\u{130}\u{0}\u{FFFD}".chars().collect();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        for expr in [GPT2, LLAMA3] {
            let custom = PreTokenizer::from_regexes(&[expr]).unwrap();
            assert!(!matches!(custom.splitters[0], Splitter::Regex { .. }));
            let regex = by_regex(expr);
            for _ in 0..3000 {
                let len = next() % 24;
                let text: String = (0..len)
                    .map(|_| alphabet[next() as usize % alphabet.len()])
                    .collect();
                assert_eq!(
                    custom.split(text.as_bytes()),
                    regex.split(text.as_bytes()),
                    "{expr}: {text:?}"
                );
            }
        }
    }
}
