// Package provider is agentq's client for OpenAI-compatible LLM and
// embeddings servers: OpenAI, Azure OpenAI, vLLM, Ollama, llama.cpp's
// server, LiteLLM and anything else that speaks /v1/chat/completions and
// /v1/embeddings. The rater and the lab use Chat; the indexer uses
// Embedder. Prompts are built in package chat; this package only sends
// them.
//
// # Bounded calls
//
// Every call ends within its Timeout (Options.Timeout: 5 s for chat, 30 s
// per embeddings batch by default), whatever the server does. Inside it, an
// attempt that fails with 408, 429, 5xx (but 501) or a dropped connection
// is retried up to MaxRetries times. The wait before a retry is what the
// server asked for in Retry-After (seconds or an HTTP date) or
// retry-after-ms, else an exponential backoff with jitter. When that wait
// plus another attempt as long as the last would pass the deadline, the
// call stops at once as unavailable instead of sleeping into a timeout. A
// client-side rate limit (MaxRPS) spaces every attempt, retries included.
// Retries go through hashicorp/go-retryablehttp with a per-call policy.
//
// # Errors
//
// Callers tell three outcomes apart with errors.Is:
//
//   - ErrUnavailable: the provider is down, overloaded or too slow
//     (connection refused, 5xx or 429 after the retries, no answer within
//     the timeout). These errors are also bus.Unavailable, so a consumer's
//     runner naks the event and backs off without spending its delivery
//     budget.
//   - ErrRejected: the server refused this request (400, 401, 404, ...).
//     Not an outage: the rater falls back to its rules.
//   - ErrBadOutput: the server answered with something unusable (junk, no
//     choices, no JSON object in JSON mode). Not an outage either.
//
// Embedder adds ErrDimensionChanged (*DimensionError) when the model's
// vectors change size. A cancelled caller context returns that context's
// error, unclassified. *APIError carries the server's status and message.
//
// # JSON mode
//
// ChatRequest.JSON sends response_format json_object, ChatRequest.Schema
// json_schema. Servers that reject response_format with a 400 naming it
// (older llama.cpp, some vLLM models) are asked again without it, once per
// Chat; from then on JSON mode relies on the prompt. Either way the answer
// must hold a JSON object: ChatResponse.JSON is the last top-level object
// in the content, so prose and ```json fences around it do not matter.
//
// # Why not go-openai's client
//
// The wire types are go-openai's (response formats, completions,
// embeddings), but requests are sent here: go-openai's
// ChatCompletionRequest drops a temperature of 0 (a float32 with
// omitempty, sashabaranov/go-openai#9), and its documented workaround,
// math.SmallestNonzeroFloat32, makes llama.cpp-based servers divide logits
// by 1e-45. The request body is chat.OpenAIRequest, whose temperature is a
// pointer, plus response_format.
//
// Tests use providertest, a local server speaking the same protocol that
// can be made slow, rate-limited, failing, down or junk.
package provider
