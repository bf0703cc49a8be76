//! Provider wire formats (Anthropic Messages, OpenAI Chat Completions).
