"""Where a model comes from and how it is built: resolve (a name, folder, GGUF file or hub id to a folder), load
(any transformers model, checked), gguf_cache (a GGUF file's dequantized weights kept under its hash)."""
