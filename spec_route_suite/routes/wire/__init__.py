"""The wire kinds' adapters and what they read: one module per wire (OpenAI, llama.cpp's /completion, SGLang's
/generate, in-process transformers) and their shared HTTP, SSE and answer readers. kinds.py's BUILT_IN names them."""
