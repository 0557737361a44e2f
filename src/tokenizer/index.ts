/** Public tokenizer API: the Tokenizer contract and the vocabularies that implement it. */
export type { EncodeOptions, StreamDecoder, Tokenizer } from "./tokenizer.ts";
export { PieceTable, SpmTokenizer, TokenType, type PieceList, type SpmVocab } from "./spm.ts";
export {
  LLAMA2C_BOS_ID,
  LLAMA2C_EOS_ID,
  LLAMA2C_UNK_ID,
  llama2cTokenizerFromFile,
  loadLlama2cTokenizer,
  parseLlama2cTokenizer,
  type Llama2cTokenizerFile,
} from "./llama2c.ts";
export { loadGGUFTokenizer, tokenizerFromGGUF, type GGUFTokenizer } from "./gguf-vocab.ts";
