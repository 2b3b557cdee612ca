"""Text to token ids and back: GPT-2's byte-level BPE, tokenizer.json, SentencePiece-style BPE, a GGUF
file's own vocabulary, and chat templates."""
