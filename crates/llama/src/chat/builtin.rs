//! Chat templates known by name, rendered in code as llama.cpp's
//! `llm_chat_apply_template` does, and the detection of a template from the
//! text of a Jinja template (`llm_chat_detect_template`).

use super::Message;

/// A built-in chat template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// `<|im_start|>role\n...<|im_end|>\n`.
    ChatMl,
    /// `[INST] ... [/INST]` without a system block.
    Llama2,
    /// Llama 2 with `<<SYS>>`.
    Llama2Sys,
    /// Llama 2 with `<<SYS>>` and `<s>` inside the history.
    Llama2SysBos,
    /// Llama 2 with `<<SYS>>` and trimmed messages.
    Llama2SysStrip,
    /// Mistral v1.
    MistralV1,
    /// Mistral v3.
    MistralV3,
    /// Mistral v3 tekken.
    MistralV3Tekken,
    /// Mistral v7.
    MistralV7,
    /// Mistral v7 tekken.
    MistralV7Tekken,
    /// Phi 3.
    Phi3,
    /// Phi 4.
    Phi4,
    /// Falcon 3.
    Falcon3,
    /// Zephyr.
    Zephyr,
    /// AlphaMonarch.
    Monarch,
    /// Gemma (system merged into the first user turn).
    Gemma,
    /// Orion.
    Orion,
    /// OpenChat 3.5.
    OpenChat,
    /// Vicuna 1.1.
    Vicuna,
    /// Vicuna with a `SYSTEM:` prefix.
    VicunaOrca,
    /// DeepSeek coder.
    DeepSeek,
    /// DeepSeek V2.
    DeepSeek2,
    /// DeepSeek V3.
    DeepSeek3,
    /// Llama 3.
    Llama3,
}

/// Names of the templates built in here, as `--chat-template` takes them.
pub const NAMES: &[(&str, Builtin)] = &[
    ("chatml", Builtin::ChatMl),
    ("llama2", Builtin::Llama2),
    ("llama2-sys", Builtin::Llama2Sys),
    ("llama2-sys-bos", Builtin::Llama2SysBos),
    ("llama2-sys-strip", Builtin::Llama2SysStrip),
    ("mistral-v1", Builtin::MistralV1),
    ("mistral-v3", Builtin::MistralV3),
    ("mistral-v3-tekken", Builtin::MistralV3Tekken),
    ("mistral-v7", Builtin::MistralV7),
    ("mistral-v7-tekken", Builtin::MistralV7Tekken),
    ("phi3", Builtin::Phi3),
    ("phi4", Builtin::Phi4),
    ("falcon3", Builtin::Falcon3),
    ("zephyr", Builtin::Zephyr),
    ("monarch", Builtin::Monarch),
    ("gemma", Builtin::Gemma),
    ("orion", Builtin::Orion),
    ("openchat", Builtin::OpenChat),
    ("vicuna", Builtin::Vicuna),
    ("vicuna-orca", Builtin::VicunaOrca),
    ("deepseek", Builtin::DeepSeek),
    ("deepseek2", Builtin::DeepSeek2),
    ("deepseek3", Builtin::DeepSeek3),
    ("llama3", Builtin::Llama3),
];

/// What the text of a template was recognised as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detected {
    /// A template rendered here.
    Builtin(Builtin),
    /// A family llama.cpp knows that is not built in here (its name).
    Other(&'static str),
    /// Nothing known.
    Unknown,
}

impl Builtin {
    /// The template of a name, if built in.
    pub fn from_name(name: &str) -> Option<Builtin> {
        NAMES.iter().find(|(n, _)| *n == name).map(|&(_, b)| b)
    }

    /// The name of the template.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(_, b)| *b == self)
            .map_or("", |(n, _)| n)
    }

    /// Recognises a template from its name or from marker strings of its
    /// text, in llama.cpp's order of checks.
    pub fn detect(tmpl: &str) -> Detected {
        use Builtin::*;
        use Detected::{Builtin as B, Other};
        if let Some(b) = Builtin::from_name(tmpl) {
            return B(b);
        }
        let has = |s: &str| tmpl.contains(s);
        if has("<|im_start|>") {
            return if has("<|im_sep|>") {
                B(Phi4)
            } else if has("<end_of_utterance>") {
                Other("smolvlm")
            } else {
                B(ChatMl)
            };
        }
        if tmpl.starts_with("mistral") || has("[INST]") {
            if has("[SYSTEM_PROMPT]") {
                return B(MistralV7);
            }
            if has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]") {
                return if has(" [INST]") {
                    B(MistralV1)
                } else if has("\"[INST]\"") {
                    B(MistralV3Tekken)
                } else {
                    B(MistralV3)
                };
            }
            return if has("content.strip()") {
                B(Llama2SysStrip)
            } else if has("bos_token + '[INST]") {
                B(Llama2SysBos)
            } else if has("<<SYS>>") {
                B(Llama2Sys)
            } else {
                B(Llama2)
            };
        }
        let checks: &[(&dyn Fn() -> bool, Detected)] = &[
            (&|| has("<|assistant|>") && has("<|end|>"), B(Phi3)),
            (&|| has("[gMASK]<sop>"), Other("chatglm4")),
            (
                &|| has("<|assistant|>") && has("<|user|>") && has("<|tool_declare|>"),
                Other("exaone-moe"),
            ),
            (
                &|| has("<|assistant|>") && has("<|user|>") && has("</s>"),
                B(Falcon3),
            ),
            (
                &|| has("<|assistant|>") && has("<|user|>"),
                Other("glmedge"),
            ),
            (
                &|| has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>"),
                Other("glmedge"),
            ),
            (&|| has("<|user|>") && has("<|endoftext|>"), B(Zephyr)),
            (&|| has("bos_token + message['role']"), B(Monarch)),
            (&|| has("<start_of_turn>"), B(Gemma)),
            (&|| has("'\\n\\nAssistant: ' + eos_token"), B(Orion)),
            (&|| has("GPT4 Correct "), B(OpenChat)),
            (
                &|| has("USER: ") && has("ASSISTANT: ") && has("SYSTEM: "),
                B(VicunaOrca),
            ),
            (&|| has("USER: ") && has("ASSISTANT: "), B(Vicuna)),
            (&|| has("### Instruction:") && has("<|EOT|>"), B(DeepSeek)),
            (
                &|| has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>"),
                Other("command-r"),
            ),
            (
                &|| has("<|start_header_id|>") && has("<|end_header_id|>"),
                B(Llama3),
            ),
            (&|| has("[gMASK]sop"), Other("chatglm3")),
            (&|| has("<用户>"), Other("minicpm")),
            (
                &|| has("'Assistant: ' + message['content'] + eos_token"),
                B(DeepSeek2),
            ),
            (
                &|| has("<｜Assistant｜>") && has("<｜User｜>") && has("<｜end▁of▁sentence｜>"),
                B(DeepSeek3),
            ),
            (
                &|| has("[|system|]") && has("[|assistant|]") && has("[|endofturn|]"),
                Other("exaone3"),
            ),
            (&|| has("rwkv-world"), Other("rwkv-world")),
            (&|| has("<|start_of_role|>"), Other("granite")),
            (
                &|| {
                    has("message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]")
                },
                Other("gigachat"),
            ),
            (&|| has("<|role_start|>"), Other("megrez")),
            (&|| has(" Ассистент:"), Other("yandex")),
        ];
        for (test, found) in checks {
            if test() {
                return *found;
            }
        }
        Detected::Unknown
    }

    /// Renders `messages`, with the assistant's opening when `add_ass`.
    pub fn apply(self, messages: &[Message], add_ass: bool) -> String {
        use Builtin::*;
        let mut s = String::new();
        match self {
            ChatMl => {
                for m in messages {
                    s += &format!("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content);
                }
                if add_ass {
                    s += "<|im_start|>assistant\n";
                }
            }
            MistralV7 | MistralV7Tekken => {
                let sp = if self == MistralV7 { " " } else { "" };
                for m in messages {
                    match m.role.as_str() {
                        "system" => {
                            s += &format!("[SYSTEM_PROMPT]{sp}{}[/SYSTEM_PROMPT]", m.content)
                        }
                        "user" => s += &format!("[INST]{sp}{}[/INST]", m.content),
                        _ => s += &format!("{sp}{}</s>", m.content),
                    }
                }
            }
            MistralV1 | MistralV3 | MistralV3Tekken => s = self.mistral_inst(messages),
            Llama2 | Llama2Sys | Llama2SysBos | Llama2SysStrip => s = self.llama2(messages),
            Phi3 | Zephyr | Falcon3 => {
                let end = match self {
                    Phi3 => "<|end|>\n",
                    Zephyr => "<|endoftext|>\n",
                    _ => "\n",
                };
                for m in messages {
                    s += &format!("<|{}|>\n{}{end}", m.role, m.content);
                }
                if add_ass {
                    s += "<|assistant|>\n";
                }
            }
            Phi4 => {
                for m in messages {
                    s += &format!("<|im_start|>{}<|im_sep|>{}<|im_end|>", m.role, m.content);
                }
                if add_ass {
                    s += "<|im_start|>assistant<|im_sep|>";
                }
            }
            Monarch => {
                for (i, m) in messages.iter().enumerate() {
                    let bos = if i == 0 { "" } else { "<s>" };
                    s += &format!("{bos}{}\n{}</s>\n", m.role, m.content);
                }
                if add_ass {
                    s += "<s>assistant\n";
                }
            }
            Gemma => s = self.gemma(messages, add_ass),
            Orion => s = self.orion(messages),
            OpenChat => {
                for m in messages {
                    if m.role == "system" {
                        s += &format!("{}<|end_of_turn|>", m.content);
                    } else {
                        let mut role = m.role.clone();
                        if let Some(first) = role.get_mut(0..1) {
                            first.make_ascii_uppercase();
                        }
                        s += &format!("GPT4 Correct {role}: {}<|end_of_turn|>", m.content);
                    }
                }
                if add_ass {
                    s += "GPT4 Correct Assistant:";
                }
            }
            Vicuna | VicunaOrca => {
                for m in messages {
                    match m.role.as_str() {
                        "system" if self == VicunaOrca => s += &format!("SYSTEM: {}\n", m.content),
                        "system" => s += &format!("{}\n\n", m.content),
                        "user" => s += &format!("USER: {}\n", m.content),
                        "assistant" => s += &format!("ASSISTANT: {}</s>\n", m.content),
                        _ => {}
                    }
                }
                if add_ass {
                    s += "ASSISTANT:";
                }
            }
            DeepSeek => {
                for m in messages {
                    match m.role.as_str() {
                        "system" => s += &m.content,
                        "user" => s += &format!("### Instruction:\n{}\n", m.content),
                        "assistant" => s += &format!("### Response:\n{}\n<|EOT|>\n", m.content),
                        _ => {}
                    }
                }
                if add_ass {
                    s += "### Response:\n";
                }
            }
            DeepSeek2 | DeepSeek3 => s = self.deepseek23(messages, add_ass),
            Llama3 => {
                for m in messages {
                    s += &format!(
                        "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>",
                        m.role,
                        trim(&m.content)
                    );
                }
                if add_ass {
                    s += "<|start_header_id|>assistant<|end_header_id|>\n\n";
                }
            }
        }
        s
    }

    /// MistralV1 / V3 / V3-Tekken: `[INST]` turns, system prompt inside the first.
    fn mistral_inst(self, messages: &[Message]) -> String {
        use Builtin::*;
        let mut s = String::new();
        let lead = if self == MistralV1 { " " } else { "" };
        let trail = if self == MistralV3Tekken { "" } else { " " };
        let mut inside = false;
        for m in messages {
            if !inside {
                s += &format!("{lead}[INST]{trail}");
                inside = true;
            }
            match m.role.as_str() {
                "system" => s += &format!("{}\n\n", m.content),
                "user" => s += &format!("{}{lead}[/INST]", m.content),
                _ => {
                    let c = if self == MistralV3 {
                        trim(&m.content)
                    } else {
                        &m.content
                    };
                    s += &format!("{trail}{c}</s>");
                    inside = false;
                }
            }
        }
        s
    }

    /// Llama 2 and its variants: `[INST]` turns, `<<SYS>>` system prompt.
    fn llama2(self, messages: &[Message]) -> String {
        use Builtin::*;
        let mut s = String::new();
        let system = self != Llama2;
        let mut inside = true;
        s += "[INST] ";
        for m in messages {
            let c = if self == Llama2SysStrip {
                trim(&m.content)
            } else {
                &m.content
            };
            if !inside {
                inside = true;
                s += if self == Llama2SysBos {
                    "<s>[INST] "
                } else {
                    "[INST] "
                };
            }
            match m.role.as_str() {
                "system" if system => s += &format!("<<SYS>>\n{c}\n<</SYS>>\n\n"),
                "system" => s += &format!("{c}\n"),
                "user" => s += &format!("{c} [/INST]"),
                _ => {
                    s += &format!("{c}</s>");
                    inside = false;
                }
            }
        }
        s
    }

    /// Gemma: `<start_of_turn>` turns, the system prompt in the first user turn.
    fn gemma(self, messages: &[Message], add_ass: bool) -> String {
        let mut s = String::new();
        let mut system = String::new();
        for m in messages {
            if m.role == "system" {
                system += trim(&m.content);
                continue;
            }
            let role = if m.role == "assistant" {
                "model"
            } else {
                &m.role
            };
            s += &format!("<start_of_turn>{role}\n");
            if !system.is_empty() && role != "model" {
                s += &format!("{system}\n\n");
                system.clear();
            }
            s += &format!("{}<end_of_turn>\n", trim(&m.content));
        }
        if add_ass {
            s += "<start_of_turn>model\n";
        }
        s
    }

    /// Orion: `Human:` / `Assistant:` turns.
    fn orion(self, messages: &[Message]) -> String {
        let mut s = String::new();
        let mut system = String::new();
        for m in messages {
            match m.role.as_str() {
                "system" => system += &m.content,
                "user" => {
                    s += "Human: ";
                    if !system.is_empty() {
                        s += &format!("{system}\n\n");
                        system.clear();
                    }
                    s += &format!("{}\n\nAssistant: </s>", m.content);
                }
                _ => s += &format!("{}</s>", m.content),
            }
        }
        s
    }

    /// DeepSeek 2 and 3.
    fn deepseek23(self, messages: &[Message], add_ass: bool) -> String {
        use Builtin::*;
        let mut s = String::new();
        for m in messages {
            match (self, m.role.as_str()) {
                (_, "system") => s += &format!("{}\n\n", m.content),
                (DeepSeek2, "user") => s += &format!("User: {}\n\n", m.content),
                (_, "user") => s += &format!("<｜User｜>{}", m.content),
                (DeepSeek2, "assistant") => {
                    s += &format!("Assistant: {}<｜end▁of▁sentence｜>", m.content)
                }
                (_, "assistant") => {
                    s += &format!("<｜Assistant｜>{}<｜end▁of▁sentence｜>", m.content)
                }
                _ => {}
            }
        }
        if add_ass {
            s += if self == DeepSeek2 {
                "Assistant:"
            } else {
                "<｜Assistant｜>"
            };
        }
        s
    }
}

/// Trims ASCII white space at both ends, as C's `isspace` does.
fn trim(s: &str) -> &str {
    s.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c'))
}
