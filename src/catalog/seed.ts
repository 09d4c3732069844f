/**
 * The published catalog, copied from the product's price list (37 chat models) plus one model for
 * each other operation. Prices are vendor list prices in USD per 1M units; toman prices are
 * derived per exchange rate (see prices.ts). Ids marked `unknown` keep a neutral name until an
 * operator renames them. The product reads only this file at run time.
 */

export type Operation = "chat" | "embeddings" | "images" | "speech" | "transcription";

export interface SeedModel {
  id: string;
  operation: Operation;
  vendor: string;
  contextWindow: number;
  openWeight: boolean;
  /** Position in the published listing. */
  listing: number;
  /** unit → USD per 1M units, as an exact decimal string. */
  usdPer1m: Record<string, string>;
}

/**
 * Prompt-cache prices, from each vendor's published list (USD per 1M tokens): `cache_read_token`
 * for prompt tokens read from the vendor's cache (OpenAI "cached input", Gemini context caching,
 * Anthropic "cache hits"), `cache_write_token` for tokens written to it (Anthropic "5m cache
 * writes", 1.25× input). A model without one of these prices bills those tokens as input.
 */
export interface CachePrices {
  cacheRead?: string;
  cacheWrite?: string;
}

const chat = (
  listing: number,
  id: string,
  vendor: string,
  contextWindow: number,
  input: string,
  output: string,
  openWeight: boolean,
  cache: CachePrices = {},
): SeedModel => ({
  id,
  operation: "chat",
  vendor,
  contextWindow,
  openWeight,
  listing,
  usdPer1m: {
    input_token: input,
    output_token: output,
    ...(cache.cacheRead ? { cache_read_token: cache.cacheRead } : {}),
    ...(cache.cacheWrite ? { cache_write_token: cache.cacheWrite } : {}),
  },
});

export const SEED_MODELS: readonly SeedModel[] = [
  chat(1, "claude-3-5-haiku", "anthropic", 200000, "0.8", "4", false, { cacheRead: "0.08", cacheWrite: "1" }),
  chat(2, "claude-opus-4", "anthropic", 200000, "15", "75", false, { cacheRead: "1.5", cacheWrite: "18.75" }),
  chat(3, "claude-sonnet-4", "anthropic", 200000, "3", "15", false, { cacheRead: "0.3", cacheWrite: "3.75" }),
  chat(4, "claude-3-7-sonnet", "anthropic", 200000, "3", "15", false, { cacheRead: "0.3", cacheWrite: "3.75" }),
  chat(5, "catalog-05", "unlisted", 256000, "0.3", "0.9", false),
  chat(6, "command-a", "cohere", 256000, "2.5", "10", false),
  chat(7, "command-r-plus", "cohere", 128000, "2.5", "10", false),
  chat(8, "deepseek-r1", "deepseek", 164000, "0.55", "2.19", true),
  chat(9, "deepseek-v3", "deepseek", 164000, "0.27", "1.1", true),
  chat(10, "gemini-2.0-flash", "google", 1000000, "0.1", "0.4", false, { cacheRead: "0.025" }),
  chat(11, "gemini-2.5-flash", "google", 1000000, "0.3", "2.5", false, { cacheRead: "0.03" }),
  chat(12, "gemini-2.5-pro", "google", 1000000, "1.25", "10", false, { cacheRead: "0.125" }),
  chat(13, "glm-4.5", "zhipu", 128000, "0.6", "2.2", true),
  chat(14, "gpt-4.1", "openai", 1000000, "2", "8", false, { cacheRead: "0.5" }),
  chat(15, "gpt-4.1-mini", "openai", 1000000, "0.4", "1.6", false, { cacheRead: "0.1" }),
  chat(16, "gpt-4.1-nano", "openai", 1000000, "0.1", "0.4", false, { cacheRead: "0.025" }),
  chat(17, "gpt-4o", "openai", 128000, "2.5", "10", false, { cacheRead: "1.25" }),
  chat(18, "gpt-4o-mini", "openai", 128000, "0.15", "0.6", false, { cacheRead: "0.075" }),
  chat(19, "grok-3", "xai", 131000, "3", "15", false),
  chat(20, "grok-3-mini", "xai", 131000, "0.3", "0.5", false),
  chat(21, "kimi-k2", "moonshot", 131000, "0.55", "2.2", true),
  chat(22, "llama-3.3-70b-instruct", "meta", 131000, "0.12", "0.3", true),
  chat(23, "catalog-23", "unlisted", 128000, "0.1", "0.25", false),
  chat(24, "llama-4-maverick", "meta", 1000000, "0.2", "0.85", true),
  chat(25, "llama-4-scout", "meta", 10000000, "0.08", "0.3", true),
  chat(26, "minimax-m1", "minimax", 1000000, "0.3", "1.65", true),
  chat(27, "mistral-large", "mistral", 128000, "2", "6", false),
  chat(28, "mistral-small", "mistral", 128000, "0.1", "0.3", true),
  chat(29, "nova-lite", "amazon", 300000, "0.06", "0.24", false),
  chat(30, "nova-pro", "amazon", 300000, "0.8", "3.2", false),
  chat(31, "o3", "openai", 200000, "2", "8", false, { cacheRead: "0.5" }),
  chat(32, "o4-mini", "openai", 200000, "1.1", "4.4", false, { cacheRead: "0.275" }),
  chat(33, "phi-4", "microsoft", 16000, "0.07", "0.14", true),
  chat(34, "catalog-34", "unlisted", 131000, "0.35", "0.4", false),
  chat(35, "qwen3-235b-a22b", "qwen", 131000, "0.2", "0.6", true),
  chat(36, "sonar", "perplexity", 127000, "1", "1", false),
  chat(37, "catalog-37", "unlisted", 200000, "3", "15", false),
  {
    id: "text-embedding-3-small",
    operation: "embeddings",
    vendor: "openai",
    contextWindow: 8191,
    openWeight: false,
    listing: 38,
    usdPer1m: { input_token: "0.02" },
  },
  {
    id: "dall-e-3",
    operation: "images",
    vendor: "openai",
    contextWindow: 4000,
    openWeight: false,
    listing: 39,
    usdPer1m: {
      image_1024x1024_standard: "40000",
      image_1024x1792_standard: "80000",
      image_1792x1024_standard: "80000",
      image_1024x1024_hd: "80000",
      image_1024x1792_hd: "120000",
      image_1792x1024_hd: "120000",
    },
  },
  {
    id: "tts-1",
    operation: "speech",
    vendor: "openai",
    contextWindow: 4096,
    openWeight: false,
    listing: 40,
    usdPer1m: { character: "15" },
  },
  {
    id: "whisper-1",
    operation: "transcription",
    vendor: "openai",
    contextWindow: 0,
    openWeight: true,
    listing: 41,
    usdPer1m: { audio_second: "100" },
  },
  {
    id: "dall-e-2",
    operation: "images",
    vendor: "openai",
    contextWindow: 1000,
    openWeight: false,
    listing: 42,
    usdPer1m: { image_256x256_standard: "16000", image_512x512_standard: "18000", image_1024x1024_standard: "20000" },
  },
  {
    id: "gpt-image-1",
    operation: "images",
    vendor: "openai",
    contextWindow: 32000,
    openWeight: false,
    listing: 43,
    usdPer1m: {
      image_1024x1024_low: "11000",
      image_1024x1536_low: "16000",
      image_1536x1024_low: "16000",
      image_1024x1024_medium: "42000",
      image_1024x1536_medium: "63000",
      image_1536x1024_medium: "63000",
      image_1024x1024_high: "167000",
      image_1024x1536_high: "250000",
      image_1536x1024_high: "250000",
    },
  },
  {
    id: "gemini-embedding-001",
    operation: "embeddings",
    vendor: "google",
    contextWindow: 2048,
    openWeight: false,
    listing: 44,
    usdPer1m: { input_token: "0.15" },
  },
];

/** The first exchange rate, at which the published toman table was computed. */
export const SEED_TOMAN_PER_USD = 90_000n;
