"""Model backends: loading a model and what identifies it (`loading`), the primitives a backend
offers a policy (`backend`), the local transformers engine (`local`, with `batch`, `kv_cache`,
`trie`, `writing` and `attention`) and an OpenAI-compatible server (`served`). Importing this
package loads no model library."""
